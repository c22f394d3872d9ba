package sluiceotel_test

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/sluiceotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// An Observer on an SDK meter provider, read back through a manual reader.
// In production the reader is a PeriodicReader with an OTLP exporter.
func Example() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)

	obs, err := sluiceotel.New(sluiceotel.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	lim, err := core.NewMemory(core.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	for range 3 {
		lim.Allow(ctx, "tenant:acme", core.PerMinute(2).WithName("api"))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				result, _ := p.Attributes.Value("sluice.rate_limiting.result")
				policy, _ := p.Attributes.Value("sluice.rate_limiting.policy")
				lines = append(lines, fmt.Sprintf("%s result=%s policy=%s: %d", m.Name, result.AsString(), policy.AsString(), p.Value))
			}
		}
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// sluice.rate_limiting.requests result=allowed policy=api: 2
	// sluice.rate_limiting.requests result=denied policy=api: 1
}
