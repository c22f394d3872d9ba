package core

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// TestImplicitFleetSizesTheFallback: limiters given nothing that sizes
// their fallback (no WithFleet, no WithFallbackReplicas) count each other
// through their decisions, and when Redis goes away mid-run the fleet's
// fallbacks add up to about one limit, not one per replica. With Redis
// gone from the start no replica can know the fleet: each enforces the
// whole limit, and the outage's log line says so.
func TestImplicitFleetSizesTheFallback(t *testing.T) {
	t.Parallel() // waits on Redis and timers more than it computes
	if testing.Short() {
		t.Skip("runs each fleet for 2-3 s")
	}
	limit := Limit{Rate: 100, Period: time.Second, Burst: 20}
	const outage = time.Second
	for _, n := range []int{3, 6} {
		t.Run(fmt.Sprintf("%d replicas, Redis cut mid-run", n), func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr())
			prefix := WithPrefix(uniquePrefix())
			lims := make([]*Limiter, n)
			for i := range lims {
				var err error
				lims[i], err = New(outageClient(t, proxy.Addr()), prefix, WithLogger(quietLogger()))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = lims[i].Close() })
			}
			// Traffic for two heartbeats: every replica is counted.
			ctx := context.Background()
			waitFor(t, 10*time.Second, "every replica counts the whole fleet", func() bool {
				all := true
				for _, lim := range lims {
					_, _ = lim.Allow(ctx, "warm", PerSecond(1000))
					all = all && lim.FleetSize() == n
				}
				time.Sleep(20 * time.Millisecond)
				return all
			})
			if err := proxy.SetDown(true); err != nil {
				t.Fatal(err)
			}
			admitted, degraded := hammer(t, lims, "hot", limit, outage)
			share := shareOf(n)(limit)
			// Each replica's share: its burst, and its rate over the outage.
			bound := int64(n) * (int64(share.Burst) + int64(outage.Seconds()*float64(limit.Rate)/float64(n)) + 1)
			whole := int64(n) * (int64(limit.Burst) + int64(outage.Seconds()*float64(limit.Rate)))
			t.Logf("%d replicas, Redis down for %v: %d admitted (%d degraded decisions); the shares' bound %d; one whole limit per replica would be %d",
				n, outage, admitted, degraded, bound, whole)
			if degraded == 0 {
				t.Fatal("no decision was degraded: the outage did not happen")
			}
			if admitted > bound {
				t.Errorf("the fleet admitted %d during the outage, more than its shares' bound %d", admitted, bound)
			}
		})
		t.Run(fmt.Sprintf("%d replicas, Redis gone from the start", n), func(t *testing.T) {
			logs := &syncBuffer{}
			lims := make([]*Limiter, n)
			for i := range lims {
				var err error
				lims[i], err = New(outageClient(t, refusedAddr(t)), WithPrefix(uniquePrefix()), WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = lims[i].Close() })
			}
			admitted, _ := hammer(t, lims, "hot", limit, outage)
			// Each replica enforces 1/UnmetFleet of the limit: its burst,
			// and its rate over the outage.
			share := shareOf(UnmetFleet)(limit)
			bound := int64(n) * (int64(share.Burst) + int64(outage.Seconds()*float64(limit.Rate)/UnmetFleet) + 1)
			whole := int64(n) * (int64(limit.Burst) + int64(outage.Seconds()*float64(limit.Rate)))
			t.Logf("%d replicas, Redis never reached: %d admitted in %v; the stated share's bound %d; the whole limit on each would be about %d",
				n, admitted, outage, bound, whole)
			if admitted > bound {
				t.Errorf("replicas that never met their fleet admitted %d, more than 1/%d of the limit each allows (%d)", admitted, UnmetFleet, bound)
			}
			if !strings.Contains(logs.String(), "the fleet's size is not known") || !strings.Contains(logs.String(), "core.UnmetFleet") {
				t.Errorf("no log line says the fleet's size is unknown and the share assumed; log:\n%s", logs.String())
			}
		})
	}
}

// hammer decides key on every limiter from two callers each for d, and
// returns how many were admitted and how many decisions degraded.
func hammer(t *testing.T, lims []*Limiter, key string, limit Limit, d time.Duration) (admitted, degraded int64) {
	t.Helper()
	var a, g atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for _, lim := range lims {
		for range 2 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					res, err := lim.Allow(context.Background(), key, limit)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						a.Add(1)
					}
					if res.Degraded {
						g.Add(1)
					}
					time.Sleep(200 * time.Microsecond)
				}
			})
		}
	}
	wg.Wait()
	return a.Load(), g.Load()
}
