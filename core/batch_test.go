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

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/batch"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// TestBatchScriptMatchesModel sends random batches, duplicate keys
// included, at one virtual instant and compares every answer with the model
// applied in order: as single script calls on one server, and grouped by
// hash tag into a pipeline on a two-shard Ring. Both run on real Redis
// servers that decide on the test's clock (see clockScripter).
func TestBatchScriptMatchesModel(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		var now time.Time
		clock := func() int64 { return now.UnixMicro() }
		rdb := clockScripter{Scripter: redistest.NewClient(t, redistest.Addr(t)), now: clock}
		s := redisstore.New(rdb, redisstore.Config{Inflight: 4}, redisstore.Up{})
		decide, _, _ := s.Senders(false, nil)
		batchAgainstModel(t, decide, &now)
	})
	t.Run("ring", func(t *testing.T) {
		// Two private servers: the shards must be distinct.
		ring := redis.NewRing(&redis.RingOptions{
			Addrs:      map[string]string{"a": redistest.Start(t).Addr(), "b": redistest.Start(t).Addr()},
			MaxRetries: -1,
		})
		t.Cleanup(func() { ring.Close() })
		var now time.Time
		clock := func() int64 { return now.UnixMicro() }
		s := redisstore.New(clockScripter{Scripter: ring, now: clock}, redisstore.Config{Inflight: 4}, redisstore.Up{})
		pipeline := func() redis.Pipeliner { return clockPipeliner{Pipeliner: ring.Pipeline(), now: clock} }
		decide, _, _ := s.Senders(true, pipeline)
		batchAgainstModel(t, decide, &now)
	})
}

// batchAgainstModel runs random batches through send, moving the clock
// *now that send decides on, and checks every answer against the model.
func batchAgainstModel(t *testing.T, send batch.Sender[*redisstore.Query, decision], now *time.Time) {
	t.Helper()
	plans := make([]*plan, len(diffPlans))
	for i, ls := range diffPlans {
		plans[i], _ = newPlan(ls, nil)
	}
	r := rand.New(rand.NewPCG(3, 3))
	*now = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	prefix := fmt.Sprintf("b:%s:%d:", t.Name(), time.Now().UnixNano())
	model := map[string]*bucket{}
	decisions := 0
	for range 300 {
		*now = now.Add(time.Duration(r.Int64N(400_000)) * time.Microsecond)
		n := 1 + r.IntN(20)
		members := make([]*batch.Member[*redisstore.Query, decision], n)
		for i := range members {
			p := plans[r.IntN(len(plans))]
			key := fmt.Sprintf("k%d", r.IntN(4))
			c := &redisstore.Query{Key: key, RKey: redisstore.RedisKey(prefix, p.FP, key), Plan: &p.Plan, Cost: 1 + r.Int64N(min(2, p.minB))}
			c.SetRKey(c.RKey)
			if r.IntN(8) == 0 {
				c.Penalty = 500_000
			}
			if r.IntN(6) == 0 {
				c.MaxWait = min(r.Int64N(1_000_000), p.maxW)
			}
			members[i] = &batch.Member[*redisstore.Query, decision]{Req: c}
		}
		send(context.Background(), members)
		for i, m := range members {
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			c := m.Req
			b := model[c.RKey]
			if b == nil {
				b = &bucket{}
				model[c.RKey] = b
			}
			want, _ := stepBucket(b, now.UnixMicro(), c.Plan.Ticks, c.Cost, c.MaxWait, c.Penalty)
			want.At = now.UnixMicro() // the script says the instant it decided at
			if m.Res != want {
				t.Fatalf("batch member %d (%s): script %+v, model %+v", i, c.Key, m.Res, want)
			}
			decisions++
		}
	}
	t.Logf("%d decisions in 300 batches identical to the model", decisions)
}

// TestScriptArgsGroups checks how a batch's arguments are laid out: calls
// under one continuous limit with the same numbers in the lone form;
// otherwise calls with the same numbers share one group, and group
// numbers per key follow only when there is more than one group.
func TestScriptArgsGroups(t *testing.T) {
	a, _ := newPlan([]Limit{PerSecond(5)}, nil)
	b, _ := newPlan([]Limit{PerSecond(10).WithBurst(3), PerMinute(40)}, nil)
	c := func(key string, p *plan, cost int64) *redisstore.Query {
		q := &redisstore.Query{Plan: &p.Plan, Cost: cost}
		q.SetRKey(key)
		return q
	}
	tests := []struct {
		name  string
		calls []*redisstore.Query
		want  []any
	}{
		// Keys under one continuous limit with the same numbers travel in
		// the lone form: the limit's three numbers, then any trailing
		// argument not at its default.
		{"one", []*redisstore.Query{c("x", a, 1)}, []any{"1", "200000", "5"}},
		{"shared", []*redisstore.Query{c("x", a, 1), c("y", a, 1), c("x", a, 1)}, []any{"1", "200000", "5"}},
		{"shared cost", []*redisstore.Query{c("x", a, 3), c("y", a, 3)}, []any{"1", "200000", "5", "3"}},
		{"shared several limits", []*redisstore.Query{c("x", b, 1), c("y", b, 1)}, []any{"1", "1", "0", "0", "2", "1", "100000", "3", "1", "1500000", "40"}},
		{"two", []*redisstore.Query{c("x", a, 1), c("y", a, 2), c("z", a, 1)},
			[]any{"2", "1", "0", "0", "1", "1", "200000", "5", "2", "0", "0", "1", "1", "200000", "5", "1", "2", "1"}},
		{"plans", []*redisstore.Query{c("x", b, 1), c("y", a, 1)},
			[]any{"2", "1", "0", "0", "2", "1", "100000", "3", "1", "1500000", "40", "1", "0", "0", "1", "1", "200000", "5", "1", "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, args := redisstore.ScriptArgs(tt.calls)
			if len(keys) != len(tt.calls) {
				t.Fatalf("%d keys for %d calls", len(keys), len(tt.calls))
			}
			if fmt.Sprint(args) != fmt.Sprint(tt.want) {
				t.Errorf("args %v, want %v", args, tt.want)
			}
		})
	}
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
