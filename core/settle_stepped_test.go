package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// janEnd is a minute before February 2027 starts, in UTC.
var janEnd = time.Date(2027, 1, 31, 23, 59, 0, 0, time.UTC)

// steppedSettleCases are reservations on interval and calendar limits,
// keys and paths, run on a memory limiter and on real Redis (see
// TestReserveSettleStepped); each starts at janEnd.
var steppedSettleCases = []settleCase{
	{"monthly refund in its month", func(t *testing.T, lim *Limiter, now *time.Time) {
		ctx := context.Background()
		rule, _ := lim.Prepare(PerCalendarMonth(1000, "UTC"))
		rv, err := rule.Reserve(ctx, "org", 300)
		if err != nil || !rv.Result.Allowed || rv.Result.Remaining != 700 {
			t.Fatalf("Reserve(300) = %+v, %v; want admitted with 700 left", rv, err)
		}
		if err := rv.Settle(ctx, 120); err != nil {
			t.Fatal(err)
		}
		if got := remaining(t, rule, "org"); got != 880 {
			t.Fatalf("remaining after Settle(120) = %d, want 880", got)
		}
		if err := rv.Settle(ctx, 0); !errors.Is(err, ErrSettled) {
			t.Fatalf("second Settle = %v, want ErrSettled", err)
		}
	}},
	{"monthly charge after the month rolled is January's", func(t *testing.T, lim *Limiter, now *time.Time) {
		ctx := context.Background()
		rule, _ := lim.Prepare(PerCalendarMonth(1000, "UTC"))
		rv, _ := rule.Reserve(ctx, "org", 100)
		*now = now.Add(90 * time.Second) // February
		if err := rv.Settle(ctx, 700); err != nil {
			t.Fatal(err)
		}
		if got := remaining(t, rule, "org"); got != 1000 {
			t.Fatalf("February's remaining after January's Settle(700) = %d, want 1000", got)
		}
	}},
	{"monthly overshoot carries into the next month", func(t *testing.T, lim *Limiter, now *time.Time) {
		ctx := context.Background()
		rule, _ := lim.Prepare(PerCalendarMonth(1000, "UTC"))
		if res, err := rule.AllowN(ctx, "org", 900); err != nil || !res.Allowed {
			t.Fatal(res, err)
		}
		rv, _ := rule.Reserve(ctx, "org", 100)
		*now = now.Add(90 * time.Second)
		if err := rv.Settle(ctx, 600); err != nil { // January used 1500 of 1000
			t.Fatal(err)
		}
		if got := remaining(t, rule, "org"); got != 500 {
			t.Fatalf("February's remaining = %d, want 500 (January's 500 over)", got)
		}
	}},
	{"a refund never gives a later month tokens", func(t *testing.T, lim *Limiter, now *time.Time) {
		ctx := context.Background()
		rule, _ := lim.Prepare(PerCalendarMonth(1000, "UTC"))
		rv, _ := rule.Reserve(ctx, "org", 1000)
		*now = now.Add(90 * time.Second)
		if res, err := rule.AllowN(ctx, "org", 400); err != nil || !res.Allowed {
			t.Fatal(res, err)
		}
		if err := rv.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if got := remaining(t, rule, "org"); got != 600 {
			t.Fatalf("February's remaining after January's refund = %d, want 600", got)
		}
	}},
	{"interval and continuous limits together", func(t *testing.T, lim *Limiter, now *time.Time) {
		ctx := context.Background()
		rule, _ := lim.Prepare(PerInterval(10, time.Minute), PerSecond(20))
		rv, _ := rule.Reserve(ctx, "k", 5)
		if err := rv.Settle(ctx, 8); err != nil {
			t.Fatal(err)
		}
		res, err := rule.Peek(ctx, "k")
		if err != nil || res.Remaining != 2 || res.Limit != PerInterval(10, time.Minute) {
			t.Fatalf("Peek = %+v, %v; want 2 left on the interval", res, err)
		}
		rv2, _ := rule.Reserve(ctx, "k", 2)
		*now = now.Add(time.Minute)                 // the next interval
		if err := rv2.Settle(ctx, 12); err != nil { // 20 in the last one: 10 carried
			t.Fatal(err)
		}
		if got := remaining(t, rule, "k"); got != 0 {
			t.Fatalf("remaining in the next interval = %d, want 0 (10 carried)", got)
		}
	}},
	{"path: the org's monthly quota charged by the tokens used", func(t *testing.T, lim *Limiter, now *time.Time) {
		ctx := context.Background()
		pr, err := lim.PreparePath("tokens", Level{Name: "org", Limits: []Limit{PerCalendarMonth(1000, "UTC")}}, Level{Name: "user", Limits: []Limit{PerMinute(5000)}})
		if err != nil {
			t.Fatal(err)
		}
		rv, err := pr.Reserve(ctx, []string{"acme", "ann"}, 200)
		if err != nil || !rv.Result.Allowed {
			t.Fatal(rv, err)
		}
		if err := rv.Settle(ctx, 50); err != nil {
			t.Fatal(err)
		}
		rv2, _ := pr.Reserve(ctx, []string{"acme", "bob"}, 200)
		*now = now.Add(90 * time.Second) // February
		if err := rv2.Settle(ctx, 600); err != nil {
			t.Fatal(err)
		}
		// January: 50 + 600. February's quota is whole.
		res, err := pr.AllowN(ctx, []string{"acme", "ann"}, 1)
		if err != nil || !res.Allowed || res.Level != "org" || res.Remaining != 999 {
			t.Fatalf("February's first = %+v, %v; want 999 left at the org", res, err)
		}
		*now = time.Date(2027, 2, 10, 0, 0, 0, 0, time.UTC)
		rv3, _ := pr.Reserve(ctx, []string{"acme", "ann"}, 1)
		if err := rv3.Settle(ctx, 400); err != nil {
			t.Fatal(err)
		}
		res, _ = pr.AllowN(ctx, []string{"acme", "ann"}, 1)
		if res.Level != "org" || res.Remaining != 598 {
			t.Fatalf("after 401 in February = %+v; want 598 left at the org", res)
		}
	}},
}

// TestReserveSettleStepped runs steppedSettleCases on a memory limiter and
// on real Redis, on a virtual clock.
func TestReserveSettleStepped(t *testing.T) {
	addr := redistest.Addr(t)
	for _, tc := range steppedSettleCases {
		t.Run("memory/"+tc.name, func(t *testing.T) {
			now := janEnd
			lim, err := NewMemory(WithClock(func() time.Time { return now }))
			if err != nil {
				t.Fatal(err)
			}
			tc.run(t, lim, &now)
		})
		t.Run("redis/"+tc.name, func(t *testing.T) {
			now := janEnd
			tc.run(t, newClockLimiter(t, addr, &now), &now)
		})
	}
}

// steppedSettlePlans are the limit sets TestSettleSteppedDifferential
// draws from.
var steppedSettlePlans = [][]Limit{
	{PerInterval(6, 2*time.Second).WithBurst(9)},
	{PerCalendarDay(12, "America/New_York")},
	{PerSecond(4), PerCalendarMonth(30, "UTC")},
	{PerInterval(5, 3*time.Second), PerCalendarDay(20, "UTC"), {Rate: 7, Period: 1500 * time.Millisecond, Burst: 4}},
}

// TestSettleSteppedDifferential runs random requests, reservations and
// settlements on stepped limits (settled in their window or after it
// rolled, refunds, exact costs and charges into debt, and duplicates)
// against the model and a real Redis through the injected-time variants
// of both scripts, and requires identical decisions, settle replies and
// stored values at every step, and each settled bucket's expiry as the
// model's.
func TestSettleSteppedDifferential(t *testing.T) {
	plans := make([]*plan, len(steppedSettlePlans))
	for i, ls := range steppedSettlePlans {
		p, err := newPlan(ls, nil)
		if err != nil {
			t.Fatal(err)
		}
		plans[i] = p
	}
	rdb := redistest.NewClient(t, redistest.Addr(t))
	ctx := context.Background()
	prefix := uniquePrefix()
	type res struct {
		key, rkey, id string
		p             *plan
		n, at         int64
	}
	var decisions, settles, rolled, closed, dups int
	for seq := range 6 {
		r := rand.New(rand.NewPCG(uint64(seq)+1, 11))
		// Around New York's midnight, 20 hours before a month's end.
		now := time.Date(2026, 11, 30, 4, 59, 0, 0, time.UTC).UnixMicro() + int64(seq)*86400_000_000
		model := map[string]*bucket{}
		var open, done []*res
		for i := range 700 {
			now += r.Int64N(900_000)
			if r.IntN(40) == 0 {
				now += r.Int64N(4 * 3600_000_000)
			}
			p := plans[r.IntN(len(plans))]
			key := fmt.Sprintf("k%d", r.IntN(3))
			rkey := redisstore.RedisKey(fmt.Sprintf("%s%d:", prefix, seq), p.FP, key)
			b := model[rkey]
			if b == nil {
				b = &bucket{}
				model[rkey] = b
			}
			switch op := r.IntN(10); {
			case op < 5 || len(open) == 0:
				cost := 1 + r.Int64N(p.minB)
				want, _ := stepBucket(b, now, p.Ticks, cost, 0, 0)
				c := redisstore.Query{Key: key, Plan: &p.Plan, Cost: cost, Now: now}
				c.SetRKey(rkey)
				vals, err := injectedTimeScript.Run(ctx, rdb, []string{rkey}, append(c.AppendArgs(nil), now)...).Int64Slice()
				if err != nil {
					t.Fatalf("seq %d step %d: %v", seq, i, err)
				}
				got, err := decodeOne(&c, vals)
				if err != nil || got != want {
					t.Fatalf("seq %d step %d: store = %+v, %v; model = %+v", seq, i, got, err, want)
				}
				decisions++
				if op < 3 && want.Allowed {
					open = append(open, &res{key: key, rkey: rkey, id: fmt.Sprintf("r%d-%d", seq, i), p: p, n: cost, at: now})
				}
			case op < 9:
				j := r.IntN(len(open))
				rv := open[j]
				open = append(open[:j], open[j+1:]...)
				final := r.Int64N(rv.n + rv.p.minB + 1)
				mb := model[rv.rkey]
				if rolledOver(rv.p, rv.at, now) {
					rolled++
					if windowMoved(mb, rv.p, rv.at) {
						closed++
					}
				}
				wrote := settleBucketAt(mb, now, rv.at, rv.p.Ticks, final-rv.n)
				if !steppedSettleOnce(t, rdb, rv.rkey, rv.id, rv.p, final-rv.n, now, rv.at) {
					t.Fatalf("seq %d step %d: first settle not applied", seq, i)
				}
				if wrote {
					wantTTL := time.Duration(ceilDiv(mb.ttl(now, rv.p.Ticks), 1000))*time.Millisecond + expiryStretch
					if got := rdb.PTTL(ctx, rv.rkey).Val(); got > wantTTL || got < wantTTL-time.Second {
						t.Fatalf("seq %d step %d: PTTL = %v, want within a second below %v", seq, i, got, wantTTL)
					}
				}
				settles++
				done = append(done, rv)
			default:
				if len(done) == 0 {
					continue
				}
				rv := done[r.IntN(len(done))]
				if steppedSettleOnce(t, rdb, rv.rkey, rv.id, rv.p, 1, now, rv.at) {
					t.Fatalf("seq %d step %d: a duplicated settle was applied", seq, i)
				}
				dups++
			}
			for rk, mb := range model {
				got, err := rdb.Get(ctx, rk).Result()
				switch {
				case !mb.set && err == nil:
					t.Fatalf("seq %d step %d: %s = %q; the model holds none", seq, i, rk, got)
				case mb.set && got != formatBucket(mb):
					t.Fatalf("seq %d step %d: %s = %q, %v; model %q", seq, i, rk, got, err, formatBucket(mb))
				}
			}
		}
	}
	if rolled == 0 || closed == 0 || dups == 0 {
		t.Fatalf("%d settled after a roll (%d in a closed window), %d duplicates: the sequences miss what they are for", rolled, closed, dups)
	}
	t.Logf("%d decisions, %d settlements (%d after their window rolled, %d of them in a closed window), %d duplicates identical to the model", decisions, settles, rolled, closed, dups)
}

// rolledOver reports whether some stepped limit of p is in a later window
// at now than at at.
func rolledOver(p *plan, at, now int64) bool {
	for _, t := range p.Ticks {
		if t.Stepped() && t.Window(now).Idx != t.Window(at).Idx {
			return true
		}
	}
	return false
}

// windowMoved reports whether b's stepped limits were charged in a later
// window than at's.
func windowMoved(b *bucket, p *plan, at int64) bool {
	for i, t := range p.Ticks {
		if t.Stepped() && b.set && i < len(b.tats) && b.tats[i].frac > t.Window(at).Idx {
			return true
		}
	}
	return false
}

// steppedSettleOnce runs the settle script (injected time) for a
// reservation id on rkey under p, made at at, with delta at now, and
// reports whether it was applied.
func steppedSettleOnce(t *testing.T, rdb redis.Scripter, rkey, id string, p *plan, delta, now, at int64) bool {
	t.Helper()
	sc := redisstore.NewSettleQuery([2]string{rkey, rkey + "~" + id}, delta, (SettleWindow + markerMargin).Milliseconds(), &p.Plan, now, now-at)
	got, err := injectedSettleScript.Run(context.Background(), rdb, sc.Keys[:], append(sc.LoneArgs(), now)...).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return got == 1
}
