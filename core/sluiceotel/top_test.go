package sluiceotel

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestRegisterTop: the top-talkers gauges hold at most K points per limit
// and kind, the heaviest keys' counts (hashed), the totals and the error
// bounds; unregistering stops them; attributes the callback sets are
// refused in WithAttributes.
func TestRegisterTop(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	lim, err := core.NewMemory(core.WithTopTalkers(core.TopTalkers{K: 2}))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	login := core.Limit{Name: "login", Rate: 1, Period: time.Hour, Burst: 3}
	for i, n := range []int{9, 6, 2, 1} {
		for range n {
			lim.Allow(ctx, "user:"+strconv.Itoa(i), login)
		}
	}
	reg, err := RegisterTop(lim, WithMeterProvider(mp), WithAttributes(attribute.String("svc", "a")))
	if err != nil {
		t.Fatal(err)
	}
	h := func(i int) string { return "#" + core.TopKeyHash("user:"+strconv.Itoa(i)) }
	got := collectTop(t, reader)
	want := []string{
		"sluice.top.admitted_cost login " + h(0) + " a: 3",
		"sluice.top.admitted_cost login " + h(1) + " a: 3",
		"sluice.top.denials login " + h(0) + " a: 6",
		"sluice.top.denials login " + h(1) + " a: 3",
		"sluice.top.error login admitted_cost a: 0",
		"sluice.top.error login denials a: 0",
		"sluice.top.total login admitted_cost a: 9",
		"sluice.top.total login denials a: 9",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if got := collectTop(t, reader); len(got) != 0 {
		t.Errorf("after Unregister: %v", got)
	}
	if _, err := RegisterTop(lim, WithMeterProvider(mp), WithAttributes(keyTopKey.String("x"))); err == nil {
		t.Error("WithAttributes(sluice.top.key): no error")
	}
	if _, err := RegisterTop(nil); err == nil {
		t.Error("RegisterTop(nil): no error")
	}
}

// collectTop returns the top-talkers points read, sorted, as "name policy
// key-or-kind svc: value".
func collectTop(t *testing.T, reader *sdkmetric.ManualReader) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			g, ok := m.Data.(metricdata.Gauge[int64])
			if !ok || !strings.HasPrefix(m.Name, "sluice.top.") {
				continue
			}
			for _, p := range g.DataPoints {
				policy, _ := p.Attributes.Value(keyPolicy)
				which, ok := p.Attributes.Value(keyTopKey)
				if !ok {
					which, _ = p.Attributes.Value(keyTopKind)
				}
				svc, _ := p.Attributes.Value("svc")
				lines = append(lines, fmt.Sprintf("%s %s %s %s: %d", m.Name, policy.AsString(), which.AsString(), svc.AsString(), p.Value))
			}
		}
	}
	slices.Sort(lines)
	return lines
}
