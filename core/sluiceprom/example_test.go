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
	obs := sluiceprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(obs)

	lim, err := core.NewMemory(core.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	for range 3 {
		lim.Allow(context.Background(), "tenant:acme", core.PerMinute(2).WithName("api"))
	}

	want := `
# HELP sluice_decisions_total Rate-limit decisions by outcome (allowed, denied, locked), source (store, deny_cache, fallback, fail_open, fail_closed) and limit.
# TYPE sluice_decisions_total counter
sluice_decisions_total{limit="api",outcome="allowed",source="store"} 2
sluice_decisions_total{limit="api",outcome="denied",source="store"} 1
`
	err = testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_decisions_total")
	fmt.Println("metrics as expected:", err == nil)
	// Output: metrics as expected: true
}
