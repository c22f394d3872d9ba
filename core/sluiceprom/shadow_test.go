package sluiceprom

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/core"
)

// TestShadow: each decision of a shadow limit is counted in
// sluice_shadow_decisions_total, by the outcome it would have had, with
// mode="shadow", and not in sluice_decisions_total; a known series
// counts without allocating.
func TestShadow(t *testing.T) {
	c, reg := newTest(t)
	now := time.Unix(1_800_000_000, 0)
	lim, err := core.NewMemory(core.WithObserver(c), core.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	r, err := lim.Prepare(core.PerMinute(100).WithName("today"))
	if err == nil {
		r, err = r.WithShadowLimits(core.PerMinute(2).WithName("lower"), core.PerMinute(3))
	}
	if err != nil {
		t.Fatal(err)
	}
	var last core.Result
	for range 4 {
		if last, err = r.Allow(context.Background(), "tenant:acme"); err != nil || !last.Allowed {
			t.Fatalf("%+v, %v", last, err)
		}
	}
	want := `
# HELP sluice_shadow_decisions_total Decisions of shadow limits (core.Rule.WithShadowLimits), which enforce nothing, by the outcome they would have had (allowed, denied), source (as in decisions_total), limit (the shadow limit's name, "unnamed" or "other") and mode (shadow).
# TYPE sluice_shadow_decisions_total counter
sluice_shadow_decisions_total{limit="lower",mode="shadow",outcome="allowed",source="store"} 2
sluice_shadow_decisions_total{limit="lower",mode="shadow",outcome="denied",source="store"} 2
sluice_shadow_decisions_total{limit="unnamed",mode="shadow",outcome="allowed",source="store"} 3
sluice_shadow_decisions_total{limit="unnamed",mode="shadow",outcome="denied",source="store"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_shadow_decisions_total"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(c.decisions.WithLabelValues("allowed", "store", "today", "false")); got != 4 {
		t.Errorf("sluice_decisions_total{limit=today,outcome=allowed} = %v, want 4 (the shadow decisions apart)", got)
	}
	if a := testing.AllocsPerRun(1000, func() { c.ObserveDecision(last, core.SourceStore) }); a != 0 {
		t.Errorf("ObserveDecision with shadow limits on known series: %v allocs, want 0", a)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
