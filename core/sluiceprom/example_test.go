package sluiceprom_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/sluiceprom"
)

func Example() {
	reg := prometheus.NewRegistry()
	obs, err := sluiceprom.New(sluiceprom.WithRegisterer(reg))
	if err != nil {
		panic(err)
	}

	lim, err := core.NewMemory(core.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	for range 3 {
		lim.Allow(context.Background(), "tenant:acme", core.PerMinute(2).WithName("api"))
	}

	want := `
# HELP sluice_decisions_total Rate-limit decisions by outcome (allowed, denied, locked), source (store, deny_cache, fallback, fail_open, fail_closed), limit (its name, "unnamed" or "other") and dry_run (true, false).
# TYPE sluice_decisions_total counter
sluice_decisions_total{dry_run="false",limit="api",outcome="allowed",source="store"} 2
sluice_decisions_total{dry_run="false",limit="api",outcome="denied",source="store"} 1
`
	err = testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_decisions_total")
	fmt.Println("metrics as expected:", err == nil)
	// Output: metrics as expected: true
}

// Two limiters in one process, told apart by a constant label, export to
// one registry.
func Example_twoLimiters() {
	reg := prometheus.NewRegistry()
	var lims []*core.Limiter
	for _, name := range []string{"public", "internal"} {
		obs, err := sluiceprom.New(sluiceprom.WithRegisterer(reg),
			sluiceprom.WithConstLabels(prometheus.Labels{"limiter": name}))
		if err != nil {
			panic(err)
		}
		lim, err := core.NewMemory(core.WithObserver(obs))
		if err != nil {
			panic(err)
		}
		lims = append(lims, lim)
	}
	lims[0].Allow(context.Background(), "ip:192.0.2.1", core.PerSecond(10).WithName("per-ip"))
	lims[1].Allow(context.Background(), "svc:billing", core.PerSecond(100).WithName("per-service"))

	want := `
# HELP sluice_decisions_total Rate-limit decisions by outcome (allowed, denied, locked), source (store, deny_cache, fallback, fail_open, fail_closed), limit (its name, "unnamed" or "other") and dry_run (true, false).
# TYPE sluice_decisions_total counter
sluice_decisions_total{dry_run="false",limit="per-ip",limiter="public",outcome="allowed",source="store"} 1
sluice_decisions_total{dry_run="false",limit="per-service",limiter="internal",outcome="allowed",source="store"} 1
`
	err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_decisions_total")
	fmt.Println("metrics as expected:", err == nil)
	// Output: metrics as expected: true
}
