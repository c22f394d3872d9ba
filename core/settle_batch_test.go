package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/batch"
	"github.com/sluicehq/sluice/core/internal/model"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// TestSettleBatchScriptMatchesModel sends random batches of settlements
// (refunds, charges, zero deltas, a reservation settled twice in one batch,
// one settled again in a later batch, and a bucket name holding another
// program's value) at one virtual instant, and compares every reply and
// every stored value with the model applied in order: in one script call
// on one server, and grouped by hash tag into a pipeline on a two-shard
// Ring. Both run on real Redis servers that decide on the test's clock
// (see clockScripter).
func TestSettleBatchScriptMatchesModel(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		var now time.Time
		clock := func() int64 { return now.UnixMicro() }
		rdb := redistest.NewClient(t, redistest.Addr(t))
		s := redisstore.New(clockScripter{Scripter: rdb, now: clock}, redisstore.Config{Inflight: 4}, redisstore.Up{})
		decide, settle, _ := s.Senders(false, nil)
		settleBatchAgainstModel(t, decide, settle, rdb, &now)
	})
	t.Run("ring", func(t *testing.T) {
		ring := redis.NewRing(&redis.RingOptions{
			Addrs:      map[string]string{"a": redistest.Start(t).Addr(), "b": redistest.Start(t).Addr()},
			MaxRetries: -1,
		})
		t.Cleanup(func() { ring.Close() })
		var now time.Time
		clock := func() int64 { return now.UnixMicro() }
		s := redisstore.New(clockScripter{Scripter: ring, now: clock}, redisstore.Config{Inflight: 4}, redisstore.Up{})
		pipeline := func() redis.Pipeliner { return clockPipeliner{Pipeliner: ring.Pipeline(), now: clock} }
		decide, settle, _ := s.Senders(true, pipeline)
		settleBatchAgainstModel(t, decide, settle, ring, &now)
	})
}

// settleBatchAgainstModel reserves through decide and settles through
// settle in random batches, moving the clock *now they decide on, and
// checks every answer and stored value against the model.
func settleBatchAgainstModel(t *testing.T, decide batch.Sender[*redisstore.Query, decision], settle batch.Sender[*redisstore.SettleQuery, bool], rdb redis.Cmdable, now *time.Time) {
	t.Helper()
	ctx := context.Background()
	var plans []*plan
	for _, ls := range diffPlans {
		if p, _ := newPlan(ls, nil); !p.Stepped {
			plans = append(plans, p)
		}
	}
	r := rand.New(rand.NewPCG(5, 5))
	*now = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	prefix := fmt.Sprintf("sb:%s:%d:", t.Name(), time.Now().UnixNano())
	model := map[string]*bucket{}
	marked := map[string]bool{}
	var open, done []*redisstore.SettleQuery
	var applied, dups, again, failed, batched int
	for round := range 300 {
		*now = now.Add(time.Duration(r.Int64N(300_000)) * time.Microsecond)
		// Reservations: decisions taking cost.
		members := make([]*batch.Member[*redisstore.Query, decision], 1+r.IntN(6))
		for i := range members {
			p := plans[r.IntN(len(plans))]
			key := fmt.Sprintf("k%d", r.IntN(4))
			rkey := redisstore.RedisKey(prefix, p.FP, key)
			q := &redisstore.Query{Key: key, Plan: &p.Plan, Cost: 1 + r.Int64N(p.minB)}
			q.SetRKey(rkey)
			members[i] = &batch.Member[*redisstore.Query, decision]{Req: q}
		}
		decide(ctx, members)
		for i, m := range members {
			c := m.Req
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			b := model[c.RKey]
			if b == nil {
				b = &bucket{}
				model[c.RKey] = b
			}
			want, _ := stepBucket(b, now.UnixMicro(), c.Plan.Ticks, c.Cost, 0, 0)
			want.At = now.UnixMicro() // the script says the instant it decided at
			if m.Res != want {
				t.Fatalf("round %d reservation %d: script %+v, model %+v", round, i, m.Res, want)
			}
			if want.Allowed {
				open = append(open, &redisstore.SettleQuery{
					Keys:  [2]string{c.RKey, redisstore.MarkerKey(c.RKey, prefix, c.Plan.FP, fmt.Sprintf("r%d-%d", round, i))},
					Delta: r.Int64N(c.Cost+minBurst(c.Plan)+1) - c.Cost, Marker: 60_000, Plan: c.Plan,
				})
			}
		}
		// Settlements, in a batch of random size from the open ones.
		var sends []*redisstore.SettleQuery
		for n := r.IntN(min(len(open), 12) + 1); n > 0; n-- {
			j := r.IntN(len(open))
			sc := open[j]
			open = append(open[:j], open[j+1:]...)
			sends = append(sends, sc)
			if r.IntN(6) == 0 {
				sends = append(sends, sc) // twice in one batch: one applies
				dups++
			}
			done = append(done, sc)
		}
		if len(done) > 0 && r.IntN(4) == 0 {
			sends = append(sends, done[r.IntN(len(done))]) // settled before
			again++
		}
		bad := -1
		if len(sends) > 1 && r.IntN(10) == 0 {
			// A bucket name holding another program's value: that
			// settlement fails alone and leaves no marker.
			bad = r.IntN(len(sends) + 1)
			p := plans[0]
			rkey := redisstore.RedisKey(prefix, p.FP, fmt.Sprintf("list%d", round))
			if err := rdb.RPush(ctx, rkey, "x").Err(); err != nil {
				t.Fatal(err)
			}
			bc := &redisstore.SettleQuery{Keys: [2]string{rkey, redisstore.MarkerKey(rkey, prefix, p.FP, "bad")}, Delta: -1, Marker: 60_000, Plan: &p.Plan}
			sends = append(sends[:bad], append([]*redisstore.SettleQuery{bc}, sends[bad:]...)...)
		}
		if len(sends) == 0 {
			continue
		}
		sms := make([]*batch.Member[*redisstore.SettleQuery, bool], len(sends))
		for i, sc := range sends {
			sms[i] = &batch.Member[*redisstore.SettleQuery, bool]{Req: sc}
		}
		settle(ctx, sms)
		if len(sms) > 1 {
			batched++
		}
		for i, m := range sms {
			sc := m.Req
			if i == bad {
				// errKeyFailed in a batch; Redis's WRONGTYPE alone (a
				// group of one on its Ring shard).
				if m.Err == nil || !errors.Is(m.Err, redisstore.ErrKeyFailed) && !strings.Contains(m.Err.Error(), "WRONGTYPE") {
					t.Fatalf("round %d: settlement on a list = %v, %v; want it to fail alone", round, m.Res, m.Err)
				}
				if n := rdb.Exists(ctx, sc.Keys[1]).Val(); n != 0 {
					t.Fatalf("round %d: a failed settlement left its marker", round)
				}
				failed++
				continue
			}
			if m.Err != nil {
				t.Fatalf("round %d settlement %d: %v", round, i, m.Err)
			}
			want := !marked[sc.Keys[1]]
			if want {
				marked[sc.Keys[1]] = true
				settleBucket(model[sc.Keys[0]], now.UnixMicro(), sc.Plan.Ticks, sc.Delta)
				applied++
			}
			if m.Res != want {
				t.Fatalf("round %d settlement %d: applied %v, want %v", round, i, m.Res, want)
			}
		}
		for rk, b := range model {
			got, err := rdb.Get(ctx, rk).Result()
			switch {
			case !b.set && err != redis.Nil:
				t.Fatalf("round %d: %s = %q, %v; the model holds none", round, rk, got, err)
			case b.set && (err != nil || got != formatBucket(b)):
				t.Fatalf("round %d: %s = %q, %v; model %q", round, rk, got, err, formatBucket(b))
			}
		}
	}
	if dups == 0 || again == 0 || failed == 0 {
		t.Fatalf("%d duplicates in a batch, %d settled again, %d failing keys: the rounds do not reach the paths they are meant to", dups, again, failed)
	}
	t.Logf("%d settlements applied as the model says, in %d batches of several; %d twice in one batch, %d again later, %d failing alone", applied, batched, dups, again, failed)
}

// settleLoad reserves cost on keys from callers goroutines, per reserves
// reservations each, on lim (a limit that never refills within the test
// and never reaches a debt cap), and returns the reservations by caller.
func settleLoad(t *testing.T, rule *Rule, callers, per int, keys []string, cost int) [][]*Reservation {
	t.Helper()
	ctx := context.Background()
	out := make([][]*Reservation, callers)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				rv, err := rule.Reserve(ctx, keys[(g+i)%len(keys)], cost)
				if err != nil || !rv.Result.Allowed || rv.Result.Degraded {
					t.Errorf("Reserve = %+v, %v; want admitted by Redis", rv, err)
					return
				}
				out[g] = append(out[g], rv)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// parseBucket reads a stored value (see the layout table at the top of
// core/internal/redisstore/bucket.lua) into a bucket.
func parseBucket(t *testing.T, s string) *bucket {
	t.Helper()
	f := strings.Fields(s)
	b := &bucket{set: true}
	var err error
	if b.lock, err = strconv.ParseInt(f[0], 10, 64); err != nil || len(f)%2 != 1 {
		t.Fatalf("stored value %q", s)
	}
	for i := 1; i < len(f); i += 2 {
		us, err1 := strconv.ParseInt(f[i], 10, 64)
		frac, err2 := strconv.ParseInt(f[i+1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("stored value %q", s)
		}
		b.tats = append(b.tats, tat{us: us, frac: frac})
	}
	return b
}

// TestSettleConcurrentMatchesModel settles many reservations from 64
// goroutines at once on a private redis-server, through the limiter and
// its settle batcher, some of them twice at once (two Reservation values
// with one marker, as a duplicated request on two replicas has), and
// requires every bucket to end exactly as the model says: each
// reservation's difference applied once. The limit refills one event an
// hour and the debts stay within (0, one Burst beyond empty], so the
// stored value is the one before the settlements moved by the sum of the
// differences, whatever the order and the instants.
func TestSettleConcurrentMatchesModel(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	srv := redistest.Start(t)
	admin := redistest.NewClient(t, srv.Addr())
	var stores atomic.Int64
	lim := newRedisLimiter(t, srv.Addr(), WithDenyCache(false), WithObserver(storeCounter{&stores}))
	rule, _ := lim.Prepare(Limit{Rate: 1, Period: time.Hour, Burst: 1000})
	ctx := context.Background()
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	const callers, per, cost = 64, 20, 5 // 800 events reserved per key
	rvs := settleLoad(t, rule, callers, per, keys, cost)
	model := map[string]*bucket{}
	for _, k := range keys {
		rk := redisstore.RedisKey(redisOf(lim).Prefix(), rule.p.FP, k)
		v, err := admin.Get(ctx, rk).Result()
		if err != nil {
			t.Fatal(err)
		}
		model[rk] = parseBucket(t, v)
	}
	at, err := admin.Time(ctx).Result() // the model settles at this instant
	if err != nil {
		t.Fatal(err)
	}
	observed := stores.Load()

	// Each reservation settles at 1 to 10 (a refund of up to 4 or a charge
	// of up to 5): a key's debt stays between 160 and 1600 events.
	finals := make([][]int, callers)
	twins := make([][]*Reservation, callers)
	r := rand.New(rand.NewPCG(9, 9))
	for g := range callers {
		for _, rv := range rvs[g] {
			finals[g] = append(finals[g], 1+r.IntN(10))
			var twin *Reservation
			if r.IntN(5) == 0 {
				twin = &Reservation{Result: rv.Result, lim: rv.lim, p: rv.p, key: rv.key, n: rv.n, via: rv.via, id: rv.id, made: rv.made}
			}
			twins[g] = append(twins[g], twin)
		}
	}
	var settled, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, rv := range rvs[g] {
				if err := rv.Settle(ctx, finals[g][i]); err == nil {
					settled.Add(1)
				} else if errors.Is(err, ErrSettled) {
					refused.Add(1)
				} else {
					t.Errorf("Settle = %v", err)
				}
			}
		}()
		wg.Add(1)
		go func() { // the twins, settled by a caller of their own
			defer wg.Done()
			for i, tw := range twins[(g+1)%callers] {
				if tw == nil {
					continue
				}
				if err := tw.Settle(ctx, finals[(g+1)%callers][i]); err == nil {
					settled.Add(1)
				} else if errors.Is(err, ErrSettled) {
					refused.Add(1)
				} else {
					t.Errorf("Settle of a twin = %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	nrv, ntwins := int64(callers*per), int64(0)
	for g := range callers {
		for i, rv := range rvs[g] {
			rk := redisstore.RedisKey(redisOf(lim).Prefix(), rule.p.FP, rv.key)
			settleBucket(model[rk], at.UnixMicro(), rule.p.Ticks, int64(finals[g][i])-rv.n)
			if twins[g][i] != nil {
				ntwins++
			}
		}
	}
	if settled.Load() != nrv || refused.Load() != ntwins {
		t.Fatalf("%d settlements applied and %d refused as settled, want %d and %d (each twin pair applied once)", settled.Load(), refused.Load(), nrv, ntwins)
	}
	for rk, b := range model {
		got, err := admin.Get(ctx, rk).Result()
		if err != nil || got != formatBucket(b) {
			t.Errorf("%s = %q, %v; model %q", rk, got, err, formatBucket(b))
		}
	}
	if n := stores.Load() - observed; n != settled.Load()+refused.Load() {
		t.Errorf("the observer saw %d store calls during the settlements, want one per settlement (%d)", n, settled.Load()+refused.Load())
	}
	if redisOf(lim).WholeOpen() {
		t.Error("the breaker opened")
	}
	t.Logf("%d reservations on %d keys settled from %d goroutines, %d of them twice at once: every bucket as the model says", nrv, len(keys), callers, ntwins)
}

// storeCounter is an Observer that counts store calls.
type storeCounter struct{ n *atomic.Int64 }

func (storeCounter) ObserveDecision(Result, Source) {}
func (c storeCounter) ObserveStore(StoreCall)       { c.n.Add(1) }
func (storeCounter) ObserveDegraded(StoreOutage)    {}
func (storeCounter) ObserveRecovered(StoreOutage)   {}

// TestSettleBatchingCoalesces settles from 64 goroutines at once on a
// private redis-server and counts the settle script's calls: with
// batching, far fewer than settlements; without, exactly one each.
func TestSettleBatchingCoalesces(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	for _, inflight := range []int{0, 4} {
		t.Run(fmt.Sprintf("inflight=%d", inflight), func(t *testing.T) {
			srv := redistest.Start(t)
			admin := redistest.NewClient(t, srv.Addr())
			lim := newRedisLimiter(t, srv.Addr(), WithPrefix(uniquePrefix()), WithBatching(inflight), WithDenyCache(false))
			rule, _ := lim.Prepare(Limit{Rate: 1, Period: time.Hour, Burst: 1000})
			ctx := context.Background()
			const callers, per = 64, 20
			rvs := settleLoad(t, rule, callers, per, []string{"a", "b", "c", "d", "e", "f", "g", "h"}, 5)
			// One settlement first, so that Redis has the script: the
			// count is then of EVALSHA alone.
			if err := rvs[0][0].Settle(ctx, 3); err != nil {
				t.Fatal(err)
			}
			rvs[0] = rvs[0][1:]
			before, err := redistest.CommandCalls(ctx, admin)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for g := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, rv := range rvs[g] {
						if err := rv.Settle(ctx, 3); err != nil {
							t.Errorf("Settle = %v", err)
							return
						}
					}
				}()
			}
			wg.Wait()
			after, _ := redistest.CommandCalls(ctx, admin)
			calls := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
			const n = callers*per - 1
			t.Logf("%d settlements, %d script calls (%.1f settlements per call)", n, calls, float64(n)/float64(calls))
			if inflight == 0 && calls != n {
				t.Fatalf("unbatched: %d calls for %d settlements", calls, n)
			}
			if inflight > 0 && calls*2 > n {
				t.Fatalf("batched: %d calls for %d settlements, want at most half", calls, n)
			}
		})
	}
}

// minBurst is the smallest burst of p's limits: no request may cost more.
func minBurst(p *model.Plan) int64 {
	b := p.Ticks[0].B
	for _, t := range p.Ticks[1:] {
		b = min(b, t.B)
	}
	return b
}
