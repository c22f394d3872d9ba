package sluiceotel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// newTest returns an Observer on a meter provider of its own, and the
// provider's manual reader.
func newTest(t *testing.T, opts ...Option) (*Observer, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := New(append([]Option{WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return obs, reader
}

// point is one data point as the tests compare it: its instrument, its
// attributes written "k=v,k=v" in key order, and its value (a histogram's
// count).
type point struct {
	name  string
	attrs string
	value float64
}

// collect reads every data point of the Observer's scope.
func collect(t *testing.T, r *sdkmetric.ManualReader) (map[string]metricdata.Metrics, []point) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect() = %v", err)
	}
	ms := map[string]metricdata.Metrics{}
	var out []point
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, ScopeName)
		}
		for _, m := range sm.Metrics {
			ms[m.Name] = m
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out = append(out, point{m.Name, attrString(p.Attributes), float64(p.Value)})
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					out = append(out, point{m.Name, attrString(p.Attributes), p.Value})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out = append(out, point{m.Name, attrString(p.Attributes), float64(p.Value)})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out = append(out, point{m.Name, attrString(p.Attributes), float64(p.Count)})
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	slices.SortFunc(out, func(a, b point) int { return strings.Compare(a.name+" "+a.attrs, b.name+" "+b.attrs) })
	return ms, out
}

func attrString(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(parts, ",")
}

// find returns the value of the point of name with attrs, and whether
// there is one.
func find(ps []point, name, attrs string) (float64, bool) {
	for _, p := range ps {
		if p.name == name && p.attrs == attrs {
			return p.value, true
		}
	}
	return 0, false
}

func TestInstruments(t *testing.T) {
	obs, reader := newTest(t)
	api := core.PerMinute(2).WithName("api")
	obs.ObserveDecision(core.Result{Allowed: true, Limit: api}, core.SourceStore)
	obs.ObserveDecision(core.Result{Allowed: true, Wait: 30 * time.Millisecond, Limit: api}, core.SourceStore)
	obs.ObserveDecision(core.Result{Limit: api}, core.SourceStore)
	obs.ObserveDecision(core.Result{Limit: api, Locked: true}, core.SourceDenyCache)
	obs.ObserveDecision(core.Result{Allowed: true, Limit: core.PerSecond(5)}, core.SourceFallback)
	obs.ObserveDecision(core.Result{}, core.SourceFailClosed)
	const a, b = "10.0.0.1:6379", "10.0.0.2:6379"
	obs.ObserveStore(core.StoreCall{Node: a, Op: core.OpDecide, Latency: time.Millisecond})
	obs.ObserveStore(core.StoreCall{Node: a, Op: core.OpDecide, Latency: 2 * time.Millisecond})
	obs.ObserveStore(core.StoreCall{Node: b, Op: core.OpDecide, Latency: 50 * time.Millisecond, Err: context.DeadlineExceeded})
	obs.ObserveStore(core.StoreCall{Node: b, Op: core.OpDecide, Latency: time.Millisecond, Err: errors.New("boom")})
	obs.ObserveStore(core.StoreCall{Node: a, Op: core.OpDecide, Latency: 80 * time.Millisecond, Err: context.DeadlineExceeded, Paused: true})
	obs.ObserveDegraded(core.StoreOutage{Node: b, Start: time.Now().Add(-time.Minute), Err: errors.New("down")})

	const (
		req   = "sluice.rate_limiting.requests"
		wait  = "sluice.rate_limiting.time_waited"
		dur   = "sluice.store.operation.duration"
		up    = "sluice.store.up"
		outs  = "sluice.store.outages"
		otime = "sluice.store.outage.time"
	)
	ms, ps := collect(t, reader)
	tests := []struct {
		name, instrument, attrs string
		want                    float64
	}{
		{"allowed by the store", req, "sluice.rate_limiting.dry_run=false,sluice.rate_limiting.policy=api,sluice.rate_limiting.result=allowed,sluice.rate_limiting.source=store", 2},
		{"denied by the store", req, "sluice.rate_limiting.dry_run=false,sluice.rate_limiting.policy=api,sluice.rate_limiting.result=denied,sluice.rate_limiting.source=store", 1},
		{"locked from the deny cache", req, "sluice.rate_limiting.dry_run=false,sluice.rate_limiting.policy=api,sluice.rate_limiting.result=locked,sluice.rate_limiting.source=deny_cache", 1},
		{"fallback, unnamed limit", req, "sluice.rate_limiting.dry_run=false,sluice.rate_limiting.policy=unnamed,sluice.rate_limiting.result=allowed,sluice.rate_limiting.source=fallback", 1},
		{"fail closed, no policy", req, "sluice.rate_limiting.dry_run=false,sluice.rate_limiting.result=denied,sluice.rate_limiting.source=fail_closed", 1},
		{"the one reservation that waited", wait, "sluice.rate_limiting.dry_run=false,sluice.rate_limiting.policy=api", 1},
		{"calls to a", dur, "db.operation.name=decide,db.system.name=redis,sluice.store.node=" + a, 2},
		{"timeouts of b", dur, "db.operation.name=decide,db.system.name=redis,error.type=timeout,sluice.store.node=" + b, 1},
		{"other errors of b", dur, "db.operation.name=decide,db.system.name=redis,error.type=other,sluice.store.node=" + b, 1},
		{"a timeout of a while this process was paused", dur, "db.operation.name=decide,db.system.name=redis,error.type=paused,sluice.store.node=" + a, 1},
		{"a up", up, "sluice.store.node=" + a, 1},
		{"b down", up, "sluice.store.node=" + b, 0},
		{"outages of b", outs, "sluice.store.node=" + b, 1},
	}
	for _, tt := range tests {
		if got, ok := find(ps, tt.instrument, tt.attrs); !ok || got != tt.want {
			t.Errorf("%s: %s{%s} = %v (found %v), want %v", tt.name, tt.instrument, tt.attrs, got, ok, tt.want)
		}
	}
	if got, _ := find(ps, otime, "sluice.store.node="+b); got < 60 || got > 120 {
		t.Errorf("%s of b a minute into its outage = %v, want about 60", otime, got)
	}
	if n := len(ps); n != len(tests)+2 { // and the outage time of a and b
		t.Errorf("%d data points, want %d:", n, len(tests)+2)
		for _, p := range ps {
			t.Logf("%s{%s} %v", p.name, p.attrs, p.value)
		}
	}

	units := map[string]string{req: "{request}", wait: "s", dur: "s", up: "", outs: "{outage}", otime: "s"}
	for name, unit := range units {
		m, ok := ms[name]
		if !ok {
			t.Errorf("no instrument %s", name)
			continue
		}
		if m.Unit != unit {
			t.Errorf("%s: unit %q, want %q", name, m.Unit, unit)
		}
		if m.Description == "" {
			t.Errorf("%s: no description", name)
		}
	}
	if h, ok := ms[dur].Data.(metricdata.Histogram[float64]); ok {
		if got := h.DataPoints[0].Bounds; !slices.Equal(got, latencyBounds) {
			t.Errorf("%s bounds = %v, want %v", dur, got, latencyBounds)
		}
	}
	if h, ok := ms[wait].Data.(metricdata.Histogram[float64]); ok {
		if got := h.DataPoints[0].Bounds; !slices.Equal(got, waitBounds) {
			t.Errorf("%s bounds = %v, want %v", wait, got, waitBounds)
		}
		if got := h.DataPoints[0].Sum; got != .03 {
			t.Errorf("%s sum = %v, want 0.03", wait, got)
		}
	}
	if s, ok := ms[otime].Data.(metricdata.Sum[float64]); !ok || !s.IsMonotonic {
		t.Errorf("%s is %T (monotonic %v), want a monotonic sum", otime, ms[otime].Data, ok && s.IsMonotonic)
	}
}

// TestOutageInProgress: an outage's time so far shows at every collection,
// not only once it ends.
func TestOutageInProgress(t *testing.T) {
	const node = "10.0.0.2:6379"
	const otime = "sluice.store.outage.time"
	hourAgo := time.Now().Add(-time.Hour)
	steps := []struct {
		name     string
		do       func(obs *Observer)
		min, max float64 // the node's outage time at the next collection
		up       float64
	}{
		{"first seen", func(obs *Observer) { obs.ObserveStore(core.StoreCall{Node: node, Latency: time.Millisecond}) }, 0, 0, 1},
		{"an hour into an outage", func(obs *Observer) { obs.ObserveDegraded(core.StoreOutage{Node: node, Start: hourAgo}) }, 3600, 3660, 0},
		{"recovered after 90 minutes", func(obs *Observer) {
			obs.ObserveRecovered(core.StoreOutage{Node: node, Start: hourAgo, Duration: 90 * time.Minute})
		}, 5400, 5400, 1},
		{"a second outage, begun now", func(obs *Observer) { obs.ObserveDegraded(core.StoreOutage{Node: node, Start: time.Now()}) }, 5400, 5460, 0},
	}
	obs, reader := newTest(t)
	for _, s := range steps {
		s.do(obs)
		_, ps := collect(t, reader)
		if got, ok := find(ps, otime, "sluice.store.node="+node); !ok || got < s.min || got > s.max {
			t.Errorf("%s: %s = %v (found %v), want in [%v, %v]", s.name, otime, got, ok, s.min, s.max)
		}
		if got, ok := find(ps, "sluice.store.up", "sluice.store.node="+node); !ok || got != s.up {
			t.Errorf("%s: sluice.store.up = %v (found %v), want %v", s.name, got, ok, s.up)
		}
	}
}

func TestDryRun(t *testing.T) {
	obs, reader := newTest(t)
	trial := core.PerMinute(100).WithName("export")
	for _, res := range []core.Result{
		{Allowed: true, Limit: trial},
		{Limit: trial},
		{Limit: trial, DryRun: true},
		{Limit: trial, DryRun: true},
	} {
		obs.ObserveDecision(res, core.SourceStore)
	}
	_, ps := collect(t, reader)
	const attrs = "sluice.rate_limiting.dry_run=%v,sluice.rate_limiting.policy=export,sluice.rate_limiting.result=denied,sluice.rate_limiting.source=store"
	for dry, want := range map[bool]float64{false: 1, true: 2} {
		if got, _ := find(ps, "sluice.rate_limiting.requests", fmt.Sprintf(attrs, dry)); got != want {
			t.Errorf("denied with dry_run=%v = %v, want %v", dry, got, want)
		}
	}
}

// TestTimeWaited: sluice.rate_limiting.time_waited records the waits of
// admitted reservations, by policy and dry run, and nothing for an
// admission that need not wait or a denial.
func TestTimeWaited(t *testing.T) {
	obs, reader := newTest(t, WithMaxLimitNames(1))
	api := core.PerMinute(100).WithName("api")
	const ms = time.Millisecond
	for _, res := range []core.Result{
		{Allowed: true, Wait: 30 * ms, Limit: api},
		{Allowed: true, Wait: 2 * time.Second, Limit: api},
		{Allowed: true, Limit: api},                                // at once: not a wait
		{Limit: api, RetryAfter: time.Second},                      // denied
		{Allowed: true, Wait: 10 * ms, Limit: api, DryRun: true},   // a dry-run rule's
		{Allowed: true, Wait: 40 * ms, Limit: core.PerSecond(5)},   // unnamed
		{Allowed: true, Wait: 50 * ms, Limit: api.WithName("b")},   // beyond the bound
		{Allowed: true, Wait: 70 * ms, Limit: api.WithName("c")},   // beyond the bound
		{Allowed: true, Wait: 20 * ms, Limit: api, Degraded: true}, // the local fallback's
	} {
		obs.ObserveDecision(res, core.SourceStore)
	}
	obs.ObserveDecision(core.Result{}, core.SourceFailClosed)
	metrics, _ := collect(t, reader)
	h, ok := metrics["sluice.rate_limiting.time_waited"].Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("sluice.rate_limiting.time_waited is %T, want a float64 histogram", metrics["sluice.rate_limiting.time_waited"].Data)
	}
	type agg struct {
		count uint64
		sum   float64
	}
	got := map[string]agg{}
	for _, p := range h.DataPoints {
		got[attrString(p.Attributes)] = agg{p.Count, p.Sum}
	}
	want := map[string]agg{
		"sluice.rate_limiting.dry_run=false,sluice.rate_limiting.policy=api":     {3, 2.05},
		"sluice.rate_limiting.dry_run=true,sluice.rate_limiting.policy=api":      {1, .01},
		"sluice.rate_limiting.dry_run=false,sluice.rate_limiting.policy=unnamed": {1, .04},
		"sluice.rate_limiting.dry_run=false,sluice.rate_limiting.policy=other":   {2, .12},
	}
	if len(got) != len(want) {
		t.Errorf("%d attribute sets, want %d: %v", len(got), len(want), got)
	}
	for attrs, w := range want {
		if g, ok := got[attrs]; !ok || g.count != w.count || math.Abs(g.sum-w.sum) > 1e-9 {
			t.Errorf("time_waited{%s} = %+v (found %v), want %+v", attrs, g, ok, w)
		}
	}
}

// TestPolicyCardinality: however many distinct limits a service uses, the
// policy attribute and the Observer's own maps stay bounded.
func TestPolicyCardinality(t *testing.T) {
	tests := []struct {
		name       string
		opts       []Option
		limit      func(i int) core.Limit
		wantValues []string
		wantN      int // distinct values of the policy attribute
	}{
		{"1,000 named limits, default bound", nil,
			func(i int) core.Limit { return core.PerMinute(60).WithName(fmt.Sprintf("tenant-%d", i)) },
			[]string{"tenant-0", "tenant-99", "other"}, 101},
		{"1,000 named limits, bound 10", []Option{WithMaxLimitNames(10)},
			func(i int) core.Limit { return core.PerMinute(60).WithName(fmt.Sprintf("tenant-%d", i)) },
			[]string{"tenant-0", "tenant-9", "other"}, 11},
		{"1,000 unnamed limits of different rates", nil,
			func(i int) core.Limit { return core.PerMinute(60 + i) },
			[]string{"unnamed"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs, reader := newTest(t, tt.opts...)
			for i := range 1000 {
				obs.ObserveDecision(core.Result{Allowed: true, Wait: time.Millisecond, Limit: tt.limit(i)}, core.SourceStore)
			}
			_, ps := collect(t, reader)
			values := map[string]float64{}
			for _, p := range ps {
				if p.name == "sluice.rate_limiting.requests" {
					for _, kv := range strings.Split(p.attrs, ",") {
						if v, ok := strings.CutPrefix(kv, "sluice.rate_limiting.policy="); ok {
							values[v] += p.value
						}
					}
				}
			}
			if len(values) != tt.wantN {
				t.Errorf("policy has %d values, want %d", len(values), tt.wantN)
			}
			for _, v := range tt.wantValues {
				if values[v] == 0 {
					t.Errorf("policy lacks %q", v)
				}
			}
			if n := len(obs.series); n != tt.wantN {
				t.Errorf("the observer holds %d attribute sets, want %d", n, tt.wantN)
			}
			if n := len(obs.waits); n != tt.wantN {
				t.Errorf("the observer holds %d time waited attribute sets, want %d", n, tt.wantN)
			}
			waited := 0
			for _, p := range ps {
				if p.name == "sluice.rate_limiting.time_waited" {
					waited++
				}
			}
			if waited != tt.wantN {
				t.Errorf("time_waited has %d attribute sets, want %d", waited, tt.wantN)
			}
			total := 0.0
			for _, v := range values {
				total += v
			}
			if total != 1000 {
				t.Errorf("decisions recorded = %v, want 1000", total)
			}
		})
	}
}

// TestSharedProvider: two Observers with their own attributes on one meter
// provider report apart, store health included.
func TestSharedProvider(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	var wg sync.WaitGroup
	for _, name := range []string{"public", "internal"} {
		obs, err := New(WithMeterProvider(mp), WithAttributes(attribute.String("sluice.limiter", name)))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			obs.ObserveDecision(core.Result{Allowed: true, Limit: core.PerSecond(1).WithName("api")}, core.SourceStore)
			obs.ObserveStore(core.StoreCall{Node: "redis:6379", Op: core.OpDecide, Latency: time.Millisecond})
			if name == "internal" {
				obs.ObserveDegraded(core.StoreOutage{Node: "redis:6379", Start: time.Now()})
			}
		}()
	}
	wg.Wait()
	_, ps := collect(t, reader)
	tests := []struct {
		instrument, attrs string
		want              float64
	}{
		{"sluice.rate_limiting.requests", "sluice.limiter=public,sluice.rate_limiting.dry_run=false,sluice.rate_limiting.policy=api,sluice.rate_limiting.result=allowed,sluice.rate_limiting.source=store", 1},
		{"sluice.rate_limiting.requests", "sluice.limiter=internal,sluice.rate_limiting.dry_run=false,sluice.rate_limiting.policy=api,sluice.rate_limiting.result=allowed,sluice.rate_limiting.source=store", 1},
		{"sluice.store.up", "sluice.limiter=public,sluice.store.node=redis:6379", 1},
		{"sluice.store.up", "sluice.limiter=internal,sluice.store.node=redis:6379", 0},
		{"sluice.store.operation.duration", "db.operation.name=decide,db.system.name=redis,sluice.limiter=public,sluice.store.node=redis:6379", 1},
	}
	for _, tt := range tests {
		if got, ok := find(ps, tt.instrument, tt.attrs); !ok || got != tt.want {
			t.Errorf("%s{%s} = %v (found %v), want %v", tt.instrument, tt.attrs, got, ok, tt.want)
		}
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name    string
		opts    []Option
		wantErr string
	}{
		{"defaults", nil, ""},
		{"attributes", []Option{WithAttributes(attribute.String("service", "api"), attribute.Int("shard", 2))}, ""},
		{"the last attributes win", []Option{WithAttributes(attribute.String("error.type", "x")), WithAttributes(attribute.Int("shard", 2))}, ""},
		{"an attribute the observer sets", []Option{WithAttributes(attribute.String("sluice.rate_limiting.policy", "x"))}, "sets itself"},
		{"error.type", []Option{WithAttributes(attribute.String("error.type", "x"))}, "sets itself"},
		{"a bound of zero", []Option{WithMaxLimitNames(0)}, "at least 1"},
		{"a nil provider", []Option{WithMeterProvider(nil)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(append([]Option{WithMeterProvider(noop.NewMeterProvider())}, tt.opts...)...)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "sluiceotel: ")) {
				t.Errorf("New() = %v, want error %q", err, tt.wantErr)
			}
		})
	}
}

// TestGlobalProvider: without WithMeterProvider, the instruments come from
// the global provider.
func TestGlobalProvider(t *testing.T) {
	old := otel.GetMeterProvider()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	otel.SetMeterProvider(mp)
	t.Cleanup(func() { otel.SetMeterProvider(old); _ = mp.Shutdown(context.Background()) })

	obs, err := New()
	if err != nil {
		t.Fatal(err)
	}
	obs.ObserveDecision(core.Result{Allowed: true, Limit: core.PerSecond(1)}, core.SourceStore)
	if ms, _ := collect(t, reader); len(ms) == 0 {
		t.Error("nothing recorded on the global meter provider")
	}
}

// TestWithLimiter wires the Observer to an in-memory limiter, whose clock
// stands still: the second Wait reserves a token due in 50 ms.
func TestWithLimiter(t *testing.T) {
	obs, reader := newTest(t)
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	lim, err := core.NewMemory(core.WithObserver(obs), core.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		lim.Allow(ctx, "k", core.PerMinute(2).WithName("api"))
	}
	smooth := core.PerSecond(20).WithBurst(1).WithName("smooth")
	for range 2 {
		if _, err := lim.Wait(ctx, "w", 1, smooth); err != nil {
			t.Fatal(err)
		}
	}
	ms, ps := collect(t, reader)
	if got, _ := find(ps, "sluice.rate_limiting.requests", "sluice.rate_limiting.dry_run=false,sluice.rate_limiting.policy=api,sluice.rate_limiting.result=denied,sluice.rate_limiting.source=store"); got != 1 {
		t.Errorf("denied = %v, want 1", got)
	}
	h, _ := ms["sluice.rate_limiting.time_waited"].Data.(metricdata.Histogram[float64])
	if len(h.DataPoints) != 1 || h.DataPoints[0].Count != 1 || h.DataPoints[0].Sum != .05 ||
		attrString(h.DataPoints[0].Attributes) != "sluice.rate_limiting.dry_run=false,sluice.rate_limiting.policy=smooth" {
		t.Errorf("time_waited = %+v, want one wait of 0.05 s under policy smooth", h.DataPoints)
	}
}

// TestObserveNoAlloc: recording a decision on a known attribute set, or a
// successful store call of a known node, allocates nothing, on a no-op provider and on
// the SDK's.
func TestObserveNoAlloc(t *testing.T) {
	providers := []struct {
		name string
		mp   metric.MeterProvider
	}{
		{"noop", noop.NewMeterProvider()},
		{"sdk", sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))},
	}
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			obs, err := New(WithMeterProvider(p.mp), WithMaxLimitNames(1))
			if err != nil {
				t.Fatal(err)
			}
			obs.ObserveDecision(core.Result{Limit: core.PerSecond(1).WithName("first")}, core.SourceStore)
			for _, res := range []core.Result{
				{Allowed: true, Limit: core.PerMinute(600)},
				{Allowed: true, Limit: core.PerMinute(600).WithName("first")},
				{Allowed: true, Limit: core.PerMinute(600).WithName("second")},
				{Limit: core.PerMinute(600).WithName("first"), DryRun: true},
				{Allowed: true, Wait: 30 * time.Millisecond, Limit: core.PerMinute(600).WithName("first")},
				{Allowed: true, Wait: 30 * time.Millisecond, Limit: core.PerMinute(600)},
				{Allowed: true, Wait: 30 * time.Millisecond, Limit: core.PerMinute(600).WithName("second")},
				{Allowed: true, Wait: 30 * time.Millisecond, Limit: core.PerMinute(600).WithName("first"), DryRun: true},
			} {
				obs.ObserveDecision(res, core.SourceStore)
				if a := testing.AllocsPerRun(1000, func() { obs.ObserveDecision(res, core.SourceStore) }); a != 0 {
					t.Errorf("ObserveDecision(%v) on a known attribute set: %v allocs, want 0", res.Limit, a)
				}
			}
			// A failed call's error is classified by core.ErrorReason,
			// whose errors.As calls allocate; only success is held to 0.
			call := core.StoreCall{Node: "redis:6379", Latency: time.Millisecond}
			obs.ObserveStore(call)
			if a := testing.AllocsPerRun(1000, func() { obs.ObserveStore(call) }); a != 0 {
				t.Errorf("ObserveStore on a known node: %v allocs, want 0", a)
			}
		})
	}
}

func BenchmarkObserveDecisionSDK(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	obs, _ := New(WithMeterProvider(mp))
	res := core.Result{Allowed: true, Limit: core.PerMinute(600).WithName("api")}
	b.ReportAllocs()
	for b.Loop() {
		obs.ObserveDecision(res, core.SourceStore)
	}
}

// TestConcurrencyInstruments: a cap's acquisitions, refusals and slots in
// flight, and store calls by operation.
func TestConcurrencyInstruments(t *testing.T) {
	obs, reader := newTest(t)
	lim, err := core.NewMemory(core.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := lim.PrepareConcurrency(core.ConcurrencyLimit{Name: "uploads", Max: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var held []*core.Lease
	for range 3 {
		ls, err := cc.Acquire(ctx, "tenant:a")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls)
	}
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	obs.ObserveStore(core.StoreCall{Node: "n", Op: core.OpAcquire, Latency: time.Millisecond})
	_, ps := collect(t, reader)
	for _, tc := range []struct {
		name, attrs string
		want        float64
	}{
		{"sluice.concurrency.acquisitions", "sluice.rate_limiting.policy=uploads,sluice.rate_limiting.result=acquired,sluice.rate_limiting.source=store", 2},
		{"sluice.concurrency.acquisitions", "sluice.rate_limiting.policy=uploads,sluice.rate_limiting.result=refused,sluice.rate_limiting.source=store", 1},
		{"sluice.concurrency.in_flight", "sluice.rate_limiting.policy=uploads", 1},
		{"sluice.store.operation.duration", "db.operation.name=acquire,db.system.name=redis,sluice.store.node=n", 1},
	} {
		if got, ok := find(ps, tc.name, tc.attrs); !ok || got != tc.want {
			t.Errorf("%s{%s} = %v (found %v), want %v; all: %v", tc.name, tc.attrs, got, ok, tc.want, ps)
		}
	}
}

// TestThresholdEvents: sluice.rate_limiting.threshold_events counts
// threshold events by policy, never by key.
func TestThresholdEvents(t *testing.T) {
	obs, reader := newTest(t)
	api := core.PerMinute(100).WithName("api")
	obs.ObserveDecision(core.Result{Allowed: true, Warning: true, Limit: api}, core.SourceStore)
	obs.ObserveThreshold(api)
	obs.ObserveThreshold(api)
	obs.ObserveThreshold(core.PerSecond(5))
	_, ps := collect(t, reader)
	for policy, want := range map[string]float64{"api": 2, "unnamed": 1} {
		if got, _ := find(ps, "sluice.rate_limiting.threshold_events", "sluice.rate_limiting.policy="+policy); got != want {
			t.Errorf("threshold events of %s = %v, want %v (points %v)", policy, got, want, ps)
		}
	}
}
