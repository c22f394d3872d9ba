// Command otel wires a sluice limiter's metrics to the OpenTelemetry
// stdout exporter: it makes a few decisions and prints the metrics as JSON
// when the meter provider shuts down. An OTLP exporter
// (go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc or
// otlpmetrichttp) takes the stdout exporter's place in production.
//
//	go run ./examples/otel                         # an in-memory limiter
//	go run ./examples/otel -redis localhost:6379
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/sluiceotel"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func main() {
	addr := flag.String("redis", "", "Redis address; empty for an in-memory limiter")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *addr); err != nil {
		log.Fatal(err)
	}
}

// run makes a few decisions on a limiter observed by sluiceotel and writes
// the metrics to w.
func run(ctx context.Context, w io.Writer, addr string) error {
	exp, err := stdoutmetric.New(stdoutmetric.WithWriter(w), stdoutmetric.WithPrettyPrint())
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(
		sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(30*time.Second))))
	defer mp.Shutdown(ctx) // exports what is left; safe to call twice
	otel.SetMeterProvider(mp)

	obs, err := sluiceotel.New() // instruments from the global provider set above
	if err != nil {
		return err
	}
	var lim *core.Limiter
	if addr == "" {
		lim, err = core.NewMemory(core.WithObserver(obs))
	} else {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		lim, err = core.New(rdb, core.WithObserver(obs))
	}
	if err != nil {
		return err
	}
	// Ready, as a readiness probe calls it: the scripts are loaded and
	// connections open before the first request spends its budget.
	if err := lim.Ready(ctx); err != nil {
		return err
	}
	limit := core.PerMinute(3).WithName("api")
	for i := range 5 {
		res, err := lim.Allow(ctx, "tenant:acme", limit)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "request %d: allowed %v\n", i+1, res.Allowed)
	}
	return mp.Shutdown(ctx)
}
