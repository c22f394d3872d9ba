package sluiceprom_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/sluiceprom"
)

// TestPathLevelLabel: a path's decisions are labelled by the deciding
// level and its limit's name.
func TestPathLevelLabel(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := sluiceprom.New(sluiceprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.NewMemory(core.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	r, err := lim.PreparePath("api",
		core.Level{Name: "org", Limits: []core.Limit{core.PerHour(100).WithName("hourly")}},
		core.Level{Name: "user", Limits: []core.Limit{core.PerMinute(1)}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := r.Allow(context.Background(), "acme", "alice"); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP sluice_decisions_total Rate-limit decisions by outcome (allowed, denied, locked), source (store, deny_cache, fallback, fail_open, fail_closed), limit (its name, "unnamed" or "other") and dry_run (true, false).
# TYPE sluice_decisions_total counter
sluice_decisions_total{dry_run="false",limit="user.unnamed",outcome="allowed",source="store"} 1
sluice_decisions_total{dry_run="false",limit="user.unnamed",outcome="denied",source="store"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_decisions_total"); err != nil {
		t.Fatal(err)
	}
}
