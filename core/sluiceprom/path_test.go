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

// TestShareDenialLabels: a shared level's denial beyond its bucket is
// counted by limit, reason and class.
func TestShareDenialLabels(t *testing.T) {
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
		core.Level{Name: "upstream", Limits: []core.Limit{core.PerHour(10).WithName("hourly")},
			Share: &core.Share{Classes: []core.Class{{Name: "critical", Reserve: 0.5}, {Name: "rest"}}}},
		core.Level{Name: "tenant", Limits: []core.Limit{core.PerMinute(100)}})
	if err != nil {
		t.Fatal(err)
	}
	for range 7 { // five admitted, two refused for the critical reserve
		if _, err := r.Allow(context.Background(), "upstream", "acme"); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP sluice_share_denials_total Denials by a path's shared level beyond its bucket (core.Share), by limit (as decisions_total's), reason (fair share, class reserve) and class (the request's, "" for none).
# TYPE sluice_share_denials_total counter
sluice_share_denials_total{class="rest",limit="upstream.hourly",reason="class reserve"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_share_denials_total"); err != nil {
		t.Fatal(err)
	}
}
