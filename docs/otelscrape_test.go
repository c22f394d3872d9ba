package docs

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/core/sluiceotel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// otelExported returns the metric families a Prometheus server scrapes
// from a sluiceotel.Observer through the OpenTelemetry Prometheus
// exporter with its default naming (dots to underscores, a unit suffix
// such as _seconds, _total on counters), after one observation of every
// kind.
func otelExported(t *testing.T) map[string]family {
	t.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := sluiceotel.New(sluiceotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	observeAll(obs)
	if _, err := sluiceotel.RegisterTop(topLimiter(t), sluiceotel.WithMeterProvider(mp)); err != nil {
		t.Fatal(err)
	}
	fams := gather(t, reg, "sluiceotel through the OpenTelemetry Prometheus exporter")
	delete(fams, "target_info") // the exporter's own: the resource's attributes
	return fams
}
