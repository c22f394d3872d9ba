package sluiceprom

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/core"
)

func TestCollector(t *testing.T) {
	c := New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	perMin := core.PerMinute(2).WithName("api")
	c.ObserveDecision(core.Result{Allowed: true, Limit: perMin}, core.SourceStore)
	c.ObserveDecision(core.Result{Limit: perMin}, core.SourceStore)
	c.ObserveDecision(core.Result{Limit: perMin, Locked: true}, core.SourceDenyCache)
	c.ObserveDecision(core.Result{Allowed: true, Limit: core.PerSecond(5)}, core.SourceFallback)
	c.ObserveDecision(core.Result{}, core.SourceFailClosed)
	c.ObserveStore(time.Millisecond, nil)
	c.ObserveStore(50*time.Millisecond, errors.New("down"))
	c.ObserveDegraded(errors.New("down"))
	if got := testutil.ToFloat64(c.up); got != 0 {
		t.Fatalf("sluice_store_up during an outage = %v, want 0", got)
	}
	c.ObserveRecovered(1500 * time.Millisecond)

	tests := []struct {
		name string
		got  prometheus.Collector
		want float64
	}{
		{"allowed by the store", c.decisions.WithLabelValues("allowed", "store", "api"), 1},
		{"denied by the store", c.decisions.WithLabelValues("denied", "store", "api"), 1},
		{"locked from the deny cache", c.decisions.WithLabelValues("locked", "deny_cache", "api"), 1},
		{"fallback, unnamed limit", c.decisions.WithLabelValues("allowed", "fallback", "5/1s"), 1},
		{"fail closed", c.decisions.WithLabelValues("denied", "fail_closed", ""), 1},
		{"degraded", c.degraded, 2},
		{"deny cache hits", c.denyHits, 1},
		{"store errors", c.storeErrs, 1},
		{"outages", c.outages, 1},
		{"outage seconds", c.outageSecs, 1.5},
		{"up again", c.up, 1},
	}
	for _, tt := range tests {
		if got := testutil.ToFloat64(tt.got); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, got, tt.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_store_latency_seconds"); err != nil || n != 2 {
		t.Errorf("latency series = %d, %v; want 2", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestObserveDecisionNoAlloc(t *testing.T) {
	c := New()
	res := core.Result{Allowed: true, Limit: core.PerMinute(600)}
	c.ObserveDecision(res, core.SourceStore)
	if a := testing.AllocsPerRun(1000, func() { c.ObserveDecision(res, core.SourceStore) }); a != 0 {
		t.Fatalf("ObserveDecision on a known series: %v allocs, want 0", a)
	}
}

// TestWithLimiter wires the collector to an in-memory limiter.
func TestWithLimiter(t *testing.T) {
	c := New()
	lim, err := core.NewMemory(core.WithObserver(c))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		lim.Allow(context.Background(), "k", core.PerMinute(2))
	}
	if got := testutil.ToFloat64(c.decisions.WithLabelValues("denied", "store", "2/1m0s")); got != 1 {
		t.Fatalf("denied = %v, want 1", got)
	}
}
