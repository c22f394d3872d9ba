package core

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// leaseCounter is a LeaseObserver that sums lease events and counts
// decisions by source and store calls by kind.
type leaseCounter struct {
	mu      sync.Mutex
	ev      LeaseEvent
	bySrc   [32]atomic.Int64
	byOp    sync.Map // kind -> *atomic.Int64
	allowed atomic.Int64
}

func (c *leaseCounter) ObserveDecision(res Result, src Source) {
	c.bySrc[src].Add(1)
	if res.Allowed {
		c.allowed.Add(1)
	}
}

func (c *leaseCounter) ObserveStore(call StoreCall) {
	v, _ := c.byOp.LoadOrStore(call.Op, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (c *leaseCounter) ObserveDegraded(StoreOutage)  {}
func (c *leaseCounter) ObserveRecovered(StoreOutage) {}

func (c *leaseCounter) ops(kind string) int64 {
	v, ok := c.byOp.Load(kind)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func (c *leaseCounter) ObserveTokenLease(_ Limit, ev LeaseEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ev.Taken += ev.Taken
	c.ev.Returned += ev.Returned
	c.ev.Lost += ev.Lost
	c.ev.Spent += ev.Spent
}

func (c *leaseCounter) events() LeaseEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ev
}

// TestTokenLeasesHotKey hammers one key from one limiter: leases decide
// most requests without a round trip, and admissions stay at or under the
// ideal and above it less the bound.
func TestTokenLeasesHotKey(t *testing.T) {
	addr := redistest.Addr(t)
	obs := &leaseCounter{}
	lim := newRedisLimiter(t, addr, WithObserver(obs))
	limit := Limit{Rate: 20000, Period: time.Second, Burst: 20000}
	base, err := lim.Prepare(limit)
	if err != nil {
		t.Fatal(err)
	}
	rule, err := base.WithTokenLeases(LeaseBound{Fraction: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	bound, life := rule.LeaseBound()
	t.Logf("bound %d tokens, life %v", bound, life)
	ctx := context.Background()
	var admitted, decisions atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < time.Second {
				res, err := rule.Allow(ctx, "hot")
				if err != nil {
					t.Error(err)
					return
				}
				decisions.Add(1)
				if res.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	ideal := int64(limit.Burst) + int64(float64(limit.Rate)*el.Seconds())
	ev := obs.events()
	t.Logf("decisions %d, admitted %d, ideal %d, lease calls %d, returns %d, from leases %d, events %+v",
		decisions.Load(), admitted.Load(), ideal, obs.ops(OpLease), obs.ops(OpLeaseReturn), obs.bySrc[SourceLease].Load(), ev)
	if admitted.Load() > ideal+int64(limit.Rate/100) {
		t.Errorf("admitted %d, above the ideal %d", admitted.Load(), ideal)
	}
	if obs.bySrc[SourceLease].Load() == 0 {
		t.Errorf("no decision from a lease")
	}
	if ev.Taken != ev.Spent+ev.Returned+ev.Lost {
		t.Errorf("taken %d != spent %d + returned %d + lost %d", ev.Taken, ev.Spent, ev.Returned, ev.Lost)
	}
}
