package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/redistest"
)

// TestBatchScriptMatchesModel sends random batches, duplicate keys
// included, at one virtual instant and compares every answer with the model
// applied in order: as single script calls on one server, and grouped by
// hash tag into a pipeline on a two-shard Ring.
func TestBatchScriptMatchesModel(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		m := redistest.Miniredis(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		batchAgainstModel(t, &batcher{rdb: rdb}, func(now time.Time, d time.Duration) { m.SetTime(now); m.FastForward(d) })
	})
	t.Run("ring", func(t *testing.T) {
		m1, m2 := redistest.Miniredis(t), redistest.Miniredis(t)
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m1.Addr(), "b": m2.Addr()}})
		t.Cleanup(func() { ring.Close() })
		batchAgainstModel(t, &batcher{rdb: ring, pipe: ring.Pipeline}, func(now time.Time, d time.Duration) {
			for _, m := range []*miniredis.Miniredis{m1, m2} {
				m.SetTime(now)
				m.FastForward(d)
			}
		})
	})
}

func batchAgainstModel(t *testing.T, bt *batcher, setTime func(time.Time, time.Duration)) {
	t.Helper()
	plans := make([]*plan, len(diffPlans))
	for i, ls := range diffPlans {
		plans[i], _ = newPlan(ls, nil)
	}
	r := rand.New(rand.NewPCG(3, 3))
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	setTime(now, 0)
	model := map[string]*bucket{}
	decisions := 0
	for range 300 {
		dt := time.Duration(r.Int64N(400_000)) * time.Microsecond
		now = now.Add(dt)
		setTime(now, dt)
		n := 1 + r.IntN(20)
		batch := make([]*pending, n)
		for i := range batch {
			p := plans[r.IntN(len(plans))]
			key := fmt.Sprintf("k%d", r.IntN(4))
			c := &call{key: key, rkey: redisKey("b:", p.fp, key), plan: p, cost: 1 + r.Int64N(min(2, p.minB))}
			if r.IntN(8) == 0 {
				c.penalty = 500_000
			}
			batch[i] = &pending{c: c, done: make(chan struct{}, 1)}
		}
		bt.send(batch)
		for i, p := range batch {
			if p.err != nil {
				t.Fatal(p.err)
			}
			b := model[p.c.rkey]
			if b == nil {
				b = &bucket{}
				model[p.c.rkey] = b
			}
			want, _ := decide(b, now.UnixMicro(), p.c.plan.ticks, p.c.cost, 0, p.c.penalty)
			if p.d != want {
				t.Fatalf("batch member %d (%s): script %+v, model %+v", i, p.c.key, p.d, want)
			}
			decisions++
		}
	}
	t.Logf("%d decisions in 300 batches identical to the model", decisions)
}

// TestBatchingCoalesces runs 64 concurrent callers against a real Redis and
// counts script calls: with batching, far fewer than decisions; without,
// exactly one per decision. Admissions stay exact either way.
func TestBatchingCoalesces(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	for _, inflight := range []int{0, 4} {
		t.Run(fmt.Sprintf("inflight=%d", inflight), func(t *testing.T) {
			srv := redistest.Start(t)
			lim := newRedisLimiter(t, srv.Addr(), WithBatching(inflight), WithDenyCache(false))
			admin := redistest.NewClient(t, srv.Addr())
			ctx := context.Background()
			lim.Allow(ctx, "warm", PerSecond(1))
			before, _ := redistest.CommandCalls(ctx, admin)
			limit := Limit{Rate: 1, Period: time.Hour, Burst: 500}
			var admitted, decisions atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 100 {
						res, err := lim.Allow(ctx, fmt.Sprintf("k%d", (g+i)%8), limit)
						if err != nil || res.Degraded {
							t.Errorf("Allow = %+v, %v", res, err)
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
			after, _ := redistest.CommandCalls(ctx, admin)
			calls := after["evalsha"] - before["evalsha"]
			t.Logf("%d decisions, %d script calls (%.1f decisions per call), %d admitted", decisions.Load(), calls, float64(decisions.Load())/float64(calls), admitted.Load())
			if admitted.Load() != 8*500 {
				t.Fatalf("admitted %d, want exactly 8 keys x 500", admitted.Load())
			}
			if inflight == 0 && calls != decisions.Load() {
				t.Fatalf("unbatched: %d calls for %d decisions", calls, decisions.Load())
			}
			if inflight > 0 && calls*2 > decisions.Load() {
				t.Fatalf("batched: %d calls for %d decisions, want at most half", calls, decisions.Load())
			}
		})
	}
}

// TestBatchCancelWhileQueued cancels callers while they wait in the queue:
// they return their context's error, and the rest are answered.
func TestBatchCancelWhileQueued(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	lim := newRedisLimiter(t, proxy.Addr(), WithBatching(1))
	ctx := context.Background()
	lim.Allow(ctx, "warm", PerSecond(1))
	proxy.SetDelay(50 * time.Millisecond)
	var wg sync.WaitGroup
	var canceled, answered atomic.Int64
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, time.Duration(5+i)*time.Millisecond)
			defer cancel()
			if i%2 == 0 {
				cctx = ctx
			}
			_, err := lim.Allow(cctx, fmt.Sprintf("k%d", i), PerSecond(10))
			switch {
			case err == nil:
				answered.Add(1)
			case i%2 == 1 && errors.Is(err, context.DeadlineExceeded):
				// The caller's own deadline (reported as soon as it
				// has passed, even before its timer fires).
				canceled.Add(1)
			default:
				t.Errorf("caller %d: Allow = %v", i, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d answered, %d gave up while queued or in flight", answered.Load(), canceled.Load())
	if answered.Load() < 20 {
		t.Fatalf("only %d of the 20 patient callers were answered", answered.Load())
	}
}
