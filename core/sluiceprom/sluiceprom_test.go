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
	const a, b = "10.0.0.1:6379", "10.0.0.2:6379"
	c.ObserveStore(core.StoreCall{Node: a, Latency: time.Millisecond})
	c.ObserveStore(core.StoreCall{Node: b, Latency: 50 * time.Millisecond, Err: context.DeadlineExceeded})
	c.ObserveStore(core.StoreCall{Node: b, Latency: time.Millisecond, Err: errors.New("READONLY You can't write against a read only replica.")})
	c.ObserveStore(core.StoreCall{Node: b, Latency: time.Millisecond, Err: redisErr("READONLY You can't write against a read only replica.")})
	start := time.Now().Add(-2 * time.Second)
	c.ObserveDegraded(core.StoreOutage{Node: b, Start: start, Err: errors.New("down")})
	if got := testutil.ToFloat64(c.up.WithLabelValues(b)); got != 0 {
		t.Fatalf("sluice_store_up{node=b} during b's outage = %v, want 0", got)
	}
	if got := testutil.ToFloat64(c.up.WithLabelValues(a)); got != 1 {
		t.Fatalf("sluice_store_up{node=a} during b's outage = %v, want 1", got)
	}
	// An outage in progress counts in the outage seconds at once.
	if got := outageSeconds(t, reg, b); got < 2 || got > 60 {
		t.Fatalf("outage seconds of b two seconds into its outage = %v, want about 2", got)
	}
	c.ObserveRecovered(core.StoreOutage{Node: b, Start: start, Duration: 1500 * time.Millisecond})
	if got := outageSeconds(t, reg, b); got != 1.5 {
		t.Fatalf("outage seconds of b after a 1.5s outage = %v, want 1.5", got)
	}
	if got := outageSeconds(t, reg, a); got != 0 {
		t.Fatalf("outage seconds of a = %v, want 0", got)
	}

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
		{"timeouts of b", c.storeErrs.WithLabelValues(b, "timeout"), 1},
		{"a READONLY reply of b", c.storeErrs.WithLabelValues(b, "readonly"), 1},
		{"an unclassified error of b", c.storeErrs.WithLabelValues(b, "other"), 1},
		{"errors of a", c.storeErrs.WithLabelValues(a, "timeout"), 0},
		{"outages of b", c.outages.WithLabelValues(b), 1},
		{"outages of a", c.outages.WithLabelValues(a), 0},
		{"b up again", c.up.WithLabelValues(b), 1},
	}
	for _, tt := range tests {
		if got := testutil.ToFloat64(tt.got); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, got, tt.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_store_latency_seconds"); err != nil || n != 4 {
		t.Errorf("latency series = %d, %v; want 4 (ok and error for each node)", n, err)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_store_errors_total"); err != nil || n != 18 {
		t.Errorf("error series = %d, %v; want 18 (every reason of each node, from zero)", n, err)
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

// redisErr is an error reply as go-redis returns it.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// outageSeconds scrapes reg for node's sluice_store_outage_seconds_total.
func outageSeconds(t *testing.T, reg *prometheus.Registry, node string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_store_outage_seconds_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "node" && l.GetValue() == node {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no sluice_store_outage_seconds_total for node %q", node)
	return 0
}
