package core_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// leaseHealth is a healthLog that is also told about token leases, and
// counts the decisions leases made.
type leaseHealth struct {
	*healthLog
	mu        sync.Mutex
	ev        core.LeaseEvent
	fromLease atomic.Int64
	decisions atomic.Int64
}

func (h *leaseHealth) ObserveDecision(_ core.Result, src core.Source) {
	h.decisions.Add(1)
	if src == core.SourceLease {
		h.fromLease.Add(1)
	}
}

func (h *leaseHealth) ObserveTokenLease(_ core.Limit, ev core.LeaseEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ev.Taken += ev.Taken
	h.ev.Returned += ev.Returned
	h.ev.Lost += ev.Lost
	h.ev.Spent += ev.Spent
}

func (h *leaseHealth) events() core.LeaseEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ev
}

// TestClusterTokenLeases takes token leases on hot keys spread over a real
// Redis Cluster's masters, with adversarial keys (hash tags, braces) among
// them, from two limiters. Every lease and give-back call finds the bucket
// and its holds in one slot on the master that owns it (a CROSSSLOT or
// MOVED error would be a store error), every call below the limit is
// admitted, leases decide most requests, every token taken is spent, given back or
// lost (a lease that ended in hand), and no hold outlives a lease after
// Close.
func TestClusterTokenLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t)
	// A limit no key reaches (each takes 6,000 calls): leases decide
	// most calls however fast the machine, and every call is admitted.
	limit := core.Limit{Rate: 20000, Period: time.Second, Burst: 20000}
	keys := append(adversarialKeys()[:6], "hot:a", "hot:b", "hot:c", "{hot}d")
	type replica struct {
		lim  *core.Limiter
		obs  *leaseHealth
		rule *core.Rule
	}
	var reps []replica
	for range 2 {
		rdb := c.Client(t)
		warmClient(t, rdb)
		obs := &leaseHealth{healthLog: &healthLog{}}
		lim, _ := newTopoLimiter(t, rdb, core.WithTimeout(time.Second), core.WithObserver(obs))
		base, err := lim.Prepare(limit)
		if err != nil {
			t.Fatal(err)
		}
		rule, err := base.WithTokenLeases(core.LeaseBound{Fraction: 0.05})
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, replica{lim, obs, rule})
	}
	ctx := context.Background()
	admitted := make([]atomic.Int64, len(keys))
	const perCaller = 1500
	var wg sync.WaitGroup
	for _, r := range reps {
		for i := range keys {
			for range 2 {
				wg.Go(func() {
					for range perCaller {
						res, err := r.rule.Allow(ctx, keys[i])
						if err != nil {
							t.Errorf("Allow(%.40q) = %v", keys[i], err)
							return
						}
						if res.Allowed {
							admitted[i].Add(1)
						}
					}
				})
			}
		}
	}
	// Meanwhile, the masters that keep holds: the hot keys' holds are
	// spread over them, each beside its bucket.
	masters := map[string]*redis.Client{}
	for _, addr := range c.Masters() {
		masters[addr] = redistest.NewClient(t, addr)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	holding := map[string]bool{}
	for running := true; running && len(holding) < len(masters); {
		for addr, mc := range masters {
			if !holding[addr] && len(holdKeys(t, mc)) > 0 {
				holding[addr] = true
			}
		}
		select {
		case <-done:
			running = false
		case <-time.After(10 * time.Millisecond):
		}
	}
	<-done
	if len(holding) < 2 {
		t.Errorf("holds seen on %d masters (%v), want the hot keys' holds spread over at least 2", len(holding), holding)
	}
	for _, r := range reps {
		if err := r.lim.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range keys {
		if n := admitted[i].Load(); n != 2*2*perCaller {
			t.Errorf("key %.40q admitted %d of %d calls, want all (the limit is never reached)", k, n, 2*2*perCaller)
		}
	}
	for i, r := range reps {
		ev := r.obs.events()
		t.Logf("replica %d: %d decisions, %d from leases, %+v; %s", i, r.obs.decisions.Load(), r.obs.fromLease.Load(), ev, r.obs.healthLog)
		if n := r.obs.storeErrs.Load(); n != 0 {
			t.Errorf("replica %d: %d store errors, want none: %s", i, n, r.obs.healthLog)
		}
		if r.obs.fromLease.Load()*2 < r.obs.decisions.Load() {
			t.Errorf("replica %d: %d of %d decisions from leases, want most", i, r.obs.fromLease.Load(), r.obs.decisions.Load())
		}
		if ev.Taken == 0 || ev.Returned == 0 || ev.Taken != ev.Spent+ev.Returned+ev.Lost {
			t.Errorf("replica %d: %+v, want tokens taken and given back, each spent, given back or lost", i, ev)
		}
	}
	// A replica gives back its hands at Close; a hold whose tokens were
	// all spent stays in Redis until its lease ends (and 10 s more for a
	// give back), and no hold lives longer than one lease after Close.
	_, life := reps[0].rule.LeaseBound()
	for addr, mc := range masters {
		now, err := mc.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range holdKeys(t, mc) {
			entries, err := mc.HGetAll(ctx, h).Result()
			if err != nil {
				t.Fatal(err)
			}
			for id, v := range entries {
				if strings.HasPrefix(id, "~") {
					continue // the holds' sums (see lease.lua)
				}
				var held, until int64
				if _, err := fmt.Sscanf(v, "%d %d", &held, &until); err != nil {
					t.Fatalf("hold %q entry %q = %q: %v", h, id, v, err)
				}
				if left := time.Duration(until-now.UnixMicro()) * time.Microsecond; left > life {
					t.Errorf("master %s: hold %q of %q lives %v after Close, longer than a lease (%v)", addr, h, id, left, life)
				}
			}
		}
	}
}

// holdKeys returns the token lease holds a master keeps.
func holdKeys(t *testing.T, mc *redis.Client) []string {
	t.Helper()
	ctx := context.Background()
	var holds []string
	iter := mc.Scan(ctx, 0, "*~h2:*", 1000).Iterator()
	for iter.Next(ctx) {
		holds = append(holds, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return holds
}
