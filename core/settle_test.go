package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// settleExpiry is settle.lua's expiry expression, which
// injectedSettleScript stretches by expiryStretch.
const settleExpiry = "'PX', floordiv(ttl + 999, 1000))"

// injectedSettleScript is settle.lua on the test's clock: the instant is
// an extra last argument, as for injectedTimeScript, and the bucket's
// expiry is stretched by expiryStretch, so that Redis's own clock never
// expires a key the virtual clock still holds.
var injectedSettleScript = func() *redis.Script {
	if !strings.Contains(redisstore.SettleLua, timeLines) || !strings.Contains(redisstore.SettleLua, settleExpiry) {
		panic("settle.lua no longer reads TIME or sets PX as the test expects")
	}
	src := strings.Replace(redisstore.SettleLua, timeLines, "local now = ARGV[#ARGV] + 0\n", 1)
	src = strings.Replace(src, settleExpiry, fmt.Sprintf("'PX', floordiv(ttl + 999, 1000) + %d)", expiryStretch.Milliseconds()), 1)
	return redis.NewScript(src)
}()

// formatBucket is b as the scripts store it (see the layout table at the
// top of core/internal/redisstore/bucket.lua).
func formatBucket(b *bucket) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d", b.lock)
	for _, t := range b.tats {
		fmt.Fprintf(&sb, " %d %d", t.us, t.frac)
	}
	return sb.String()
}

// modelRes is a reservation in TestSettleDifferential.
type modelRes struct {
	key, rkey, id string
	plan          *plan
	n             int64
	settled       bool
}

// TestSettleDifferential runs random sequences of requests, reservations,
// settlements (final cost 0, the reserved cost, and anything up to one
// Burst above it) and duplicated settlements against the model and a real
// Redis, through the injected-time variants of both scripts, and requires
// identical decisions, identical settle replies and identical stored
// values at every step, and each settled bucket's expiry as the model's
// (within a second, plus the variant's stretch).
func TestSettleDifferential(t *testing.T) {
	plans := make([]*plan, len(diffPlans))
	for i, ls := range diffPlans {
		p, err := newPlan(ls, nil)
		if err != nil {
			t.Fatal(err)
		}
		plans[i] = p
	}
	rdb := redistest.NewClient(t, redistest.Addr(t))
	ctx := context.Background()
	const seqs, perSeq = 10, 1200
	const base = 1_800_000_000_000_000
	prefix := uniquePrefix()
	var decisions, settles, dups, refunds, charges, deep int
	for seq := range seqs {
		seed := uint64(seq) + 1
		r := rand.New(rand.NewPCG(seed, 7))
		model := map[string]*bucket{}
		var open, done []*modelRes
		now := base + int64(seq)*10*3600_000_000
		pfx := fmt.Sprintf("%s%d:", prefix, seq)
		for i, s := range genSteps(r, perSeq) {
			now += s.dt
			p := plans[s.plan]
			key := fmt.Sprintf("k%d", s.key)
			rkey := redisstore.RedisKey(pfx, p.FP, key)
			op := r.IntN(10)
			switch {
			case op < 4 || (op < 7 && len(open) == 0) || (op >= 7 && len(done) == 0 && len(open) == 0):
				// A request, or a reservation (the same decision).
				c := redisstore.Query{Key: key, RKey: rkey, Plan: &p.Plan, Cost: min(s.cost, p.minB), MaxWait: s.maxWait, Penalty: s.penalty}
				switch {
				case op < 2:
					c.MaxWait = 0 // a reservation decides as AllowN
				case op == 3 && len(open) > 0:
					// A long wait on an open reservation's bucket: its
					// debt may go beyond one Burst before it settles.
					rv := open[r.IntN(len(open))]
					p = rv.plan
					c = redisstore.Query{Key: rv.key, RKey: rv.rkey, Plan: &p.Plan, Cost: p.minB, MaxWait: r.Int64N(60_000_000)}
					rkey = rv.rkey
				}
				b := model[rkey]
				if b == nil {
					b = &bucket{}
					model[rkey] = b
				}
				want, _ := stepBucket(b, now, p.Ticks, c.Cost, c.MaxWait, c.Penalty)
				vals, err := injectedTimeScript.Run(ctx, rdb, []string{rkey}, append(c.AppendArgs(nil), now)...).Int64Slice()
				if err != nil {
					t.Fatalf("seed %d step %d: %v", seed, i, err)
				}
				got, err := decodeOne(&c, vals)
				if err != nil || got != want {
					t.Fatalf("seed %d step %d: store = %+v, %v; model = %+v", seed, i, got, err, want)
				}
				decisions++
				if op < 2 && want.Allowed {
					open = append(open, &modelRes{key: key, rkey: rkey, id: fmt.Sprintf("r%d-%d", seq, i), plan: p, n: c.Cost})
				}
			case op < 7 && len(open) > 0 || len(done) == 0:
				// Settle an open reservation.
				j := r.IntN(len(open))
				rv := open[j]
				open = append(open[:j], open[j+1:]...)
				var final int64
				switch r.IntN(4) {
				case 0:
				case 1:
					final = rv.n
				default:
					final = r.Int64N(rv.n + rv.plan.minB + 1)
				}
				delta := final - rv.n
				b := model[rv.rkey]
				for k, tl := range rv.plan.Ticks {
					if b.set && len(b.tats) == len(rv.plan.Ticks) && (b.tats[k].us-now)*tl.R+b.tats[k].frac > 2*tl.Capacity() {
						deep++
						break
					}
				}
				wrote := settleBucket(b, now, rv.plan.Ticks, delta)
				applied := settleOnce(t, ctx, rdb, rv, delta, now)
				if !applied {
					t.Fatalf("seed %d step %d: first settle not applied", seed, i)
				}
				if wrote {
					wantTTL := time.Duration(ceilDiv(b.ttl(now, rv.plan.Ticks), 1000))*time.Millisecond + expiryStretch
					if got := rdb.PTTL(ctx, rv.rkey).Val(); got > wantTTL || got < wantTTL-time.Second {
						t.Fatalf("seed %d step %d: PTTL = %v, want within a second below %v", seed, i, got, wantTTL)
					}
				}
				settles++
				if delta < 0 {
					refunds++
				} else if delta > 0 {
					charges++
				}
				rv.settled = true
				done = append(done, rv)
			default:
				// A duplicated (retried) settlement changes nothing.
				rv := done[r.IntN(len(done))]
				if settleOnce(t, ctx, rdb, rv, r.Int64N(2*rv.plan.minB+1)-rv.plan.minB, now) {
					t.Fatalf("seed %d step %d: a duplicated settle was applied", seed, i)
				}
				dups++
			}
			// Every stored value against the model's, in one MGET.
			rks := make([]string, 0, len(model))
			for rk := range model {
				rks = append(rks, rk)
			}
			vals, err := rdb.MGet(ctx, rks...).Result()
			if err != nil {
				t.Fatalf("seed %d step %d: MGET: %v", seed, i, err)
			}
			for j, rk := range rks {
				b := model[rk]
				got, isStr := vals[j].(string)
				switch {
				case !b.set && vals[j] != nil:
					t.Fatalf("seed %d step %d: %s = %q; the model holds none", seed, i, rk, got)
				case b.set && (!isStr || got != formatBucket(b)):
					t.Fatalf("seed %d step %d: %s = %v; model %q", seed, i, rk, vals[j], formatBucket(b))
				}
			}
		}
	}
	if refunds == 0 || charges == 0 || deep == 0 || dups == 0 {
		t.Fatalf("%d refunds, %d charges, %d on a deep debt, %d duplicates: the sequences do not reach the paths they are meant to", refunds, charges, deep, dups)
	}
	t.Logf("%d sequences: %d decisions, %d settlements (%d refunds, %d charges, %d on a debt beyond one Burst) and %d duplicated settlements identical to the model, stored values compared after every step",
		seqs, decisions, settles, refunds, charges, deep, dups)
}

// settleOnce runs the settle script for rv with delta at now and reports
// whether it was applied.
func settleOnce(t *testing.T, ctx context.Context, rdb redis.Scripter, rv *modelRes, delta, now int64) bool {
	t.Helper()
	prefix := rv.rkey[:strings.IndexByte(rv.rkey, '{')]
	keys := []string{rv.rkey, redisstore.MarkerKey(rv.rkey, prefix, rv.plan.FP, rv.id)}
	args := append([]any{delta, (SettleWindow + markerMargin).Milliseconds()}, rv.plan.Args...)
	got, err := injectedSettleScript.Run(ctx, rdb, keys, append(args, now)...).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return got == 1
}

// settleCase is one scenario run on a memory limiter and on real Redis.
type settleCase struct {
	name string
	run  func(t *testing.T, lim *Limiter, now *time.Time)
}

// remaining peeks at key under rule.
func remaining(t *testing.T, rule *Rule, key string) int {
	t.Helper()
	res, err := rule.Peek(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return res.Remaining
}

var settleCases = []settleCase{
	{"refund", func(t *testing.T, lim *Limiter, now *time.Time) {
		ctx := context.Background()
		rule, _ := lim.Prepare(PerSecond(10))
		rv, err := rule.Reserve(ctx, "k", 6)
		if err != nil || !rv.Result.Allowed || rv.Result.Remaining != 4 {
			t.Fatalf("Reserve(6) = %+v, %v; want admitted with 4 left", rv, err)
		}
		if err := rv.Settle(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if got := remaining(t, rule, "k"); got != 8 {
			t.Fatalf("remaining after Settle(2) = %d, want 8", got)
		}
		if err := rv.Settle(ctx, 0); !errors.Is(err, ErrSettled) {
			t.Fatalf("second Settle = %v, want ErrSettled", err)
		}
		if got := remaining(t, rule, "k"); got != 8 {
			t.Fatalf("remaining after a second Settle = %d, want 8", got)
		}
	}},
	{"cancel never fills beyond full", func(t *testing.T, lim *Limiter, now *time.Time) {
		ctx := context.Background()
		rule, _ := lim.Prepare(PerSecond(10))
		rv, _ := rule.Reserve(ctx, "k", 5)
		*now = now.Add(time.Second) // refilled meanwhile
		if err := rv.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 11 {
			res, err := rule.Allow(ctx, "k")
			if err != nil || res.Allowed != (i < 10) {
				t.Fatalf("Allow #%d = %+v, %v; want the 10 of a full bucket", i, res, err)
			}
		}
	}},
	{"charge goes into debt", func(t *testing.T, lim *Limiter, now *time.Time) {
		ctx := context.Background()
		rule, _ := lim.Prepare(PerSecond(10))
		rv, _ := rule.Reserve(ctx, "k", 4)
		if err := rv.Settle(ctx, 21); !errors.Is(err, ErrInvalidLimit) {
			t.Fatalf("Settle(21) = %v, want ErrInvalidLimit (at most 4 + Burst)", err)
		}
		if err := rv.Settle(ctx, 14); err != nil { // 10 more: one Burst into debt
			t.Fatal(err)
		}
		*now = now.Add(400 * time.Millisecond)
		if got := remaining(t, rule, "k"); got != 0 {
			t.Fatalf("remaining 0.4 s after a debt of 14 = %d, want 0", got)
		}
		*now = now.Add(100 * time.Millisecond)
		if got := remaining(t, rule, "k"); got != 1 {
			t.Fatalf("remaining 0.5 s after a debt of 14 = %d, want 1", got)
		}
	}},
	{"debt is capped at one Burst beyond empty", func(t *testing.T, lim *Limiter, now *time.Time) {
		ctx := context.Background()
		rule, _ := lim.Prepare(PerSecond(10))
		a, _ := rule.Reserve(ctx, "k", 5)
		b, _ := rule.Reserve(ctx, "k", 5)
		for _, rv := range []*Reservation{a, b} {
			if err := rv.Settle(ctx, 15); err != nil {
				t.Fatal(err)
			}
		}
		// 10 reserved and 20 charged, capped at 20: empty for 1 s more.
		*now = now.Add(time.Second)
		if got := remaining(t, rule, "k"); got != 0 {
			t.Fatalf("remaining after 1 s = %d, want 0", got)
		}
		*now = now.Add(100 * time.Millisecond)
		if got := remaining(t, rule, "k"); got != 1 {
			t.Fatalf("remaining after 1.1 s = %d, want 1 (debt capped at 20, not 30)", got)
		}
	}},
	{"several limits move together", func(t *testing.T, lim *Limiter, now *time.Time) {
		ctx := context.Background()
		rule, _ := lim.Prepare(PerSecond(10), PerMinute(30))
		rv, _ := rule.Reserve(ctx, "k", 8)
		if err := rv.Settle(ctx, 3); err != nil {
			t.Fatal(err)
		}
		res, err := rule.Peek(ctx, "k")
		if err != nil || res.Remaining != 7 || res.Limit != PerSecond(10) {
			t.Fatalf("Peek = %+v, %v; want 7 left on the per-second limit", res, err)
		}
		rv2, _ := rule.Reserve(ctx, "k", 7)
		if err := rv2.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if res, _ := rule.Peek(ctx, "k"); res.Remaining != 7 {
			t.Fatalf("Peek after a cancelled reservation = %+v, want 7 left", res)
		}
	}},
	{"denied has nothing to settle", func(t *testing.T, lim *Limiter, now *time.Time) {
		ctx := context.Background()
		rule, _ := lim.Prepare(PerSecond(2))
		rule.AllowN(ctx, "k", 2)
		rv, err := rule.Reserve(ctx, "k", 1)
		if err != nil || rv.Result.Allowed {
			t.Fatalf("Reserve = %+v, %v; want denied", rv, err)
		}
		if err := rv.Settle(ctx, 0); err != nil {
			t.Fatalf("Settle of a denial = %v, want nil", err)
		}
		if got := remaining(t, rule, "k"); got != 0 {
			t.Fatalf("remaining = %d, want 0", got)
		}
	}},
	{"past the settle window the reserved cost stands", func(t *testing.T, lim *Limiter, now *time.Time) {
		ctx := context.Background()
		rule, _ := lim.Prepare(PerHour(10))
		rv, _ := rule.Reserve(ctx, "k", 5)
		rv.made = rv.made.Add(-SettleWindow - time.Second)
		if err := rv.Cancel(ctx); !errors.Is(err, ErrSettled) {
			t.Fatalf("Cancel after the window = %v, want ErrSettled", err)
		}
		if got := remaining(t, rule, "k"); got != 5 {
			t.Fatalf("remaining = %d, want 5", got)
		}
	}},
}

// TestReserveSettle runs settleCases on a memory limiter and on real Redis,
// on a virtual clock.
func TestReserveSettle(t *testing.T) {
	addr := redistest.Addr(t)
	for _, tc := range settleCases {
		t.Run("memory/"+tc.name, func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			lim, err := NewMemory(WithClock(func() time.Time { return now }))
			if err != nil {
				t.Fatal(err)
			}
			tc.run(t, lim, &now)
		})
		t.Run("redis/"+tc.name, func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			tc.run(t, newClockLimiter(t, addr, &now), &now)
		})
	}
}

// TestSettleRetriedEval sends a settlement's script call twice, as a
// client retrying a call whose reply was lost does: the second changes
// nothing. The Reservation then reports ErrSettled for its own retry.
func TestSettleRetriedEval(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	var calls atomic.Int32
	base := redistest.NewClient(t, redistest.Addr(t))
	clock := func() int64 { return now.UnixMicro() }
	rdb := &dupScripter{clockScripter: clockScripter{Scripter: base, now: clock}, calls: &calls}
	lim, err := New(rdb, WithPrefix(uniquePrefix()), WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lim.now = clock
	rule, _ := lim.Prepare(PerSecond(10))
	rv, _ := rule.Reserve(ctx, "k", 8)
	rdb.dup.Store(true) // every settle is sent twice; the caller sees the second reply
	if err := rv.Settle(ctx, 2); !errors.Is(err, ErrSettled) {
		t.Fatalf("Settle with its call duplicated = %v, want ErrSettled (the first copy applied it)", err)
	}
	if got := remaining(t, rule, "k"); got != 8 {
		t.Fatalf("remaining = %d, want 8: refunded once", got)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("settle calls = %d, want 2", n)
	}
}

// dupScripter is a clockScripter that, with dup set, sends each settle
// call twice and returns the second reply.
type dupScripter struct {
	clockScripter
	dup   atomic.Bool
	calls *atomic.Int32
}

func (d *dupScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha == redisstore.SettleScript.Hash() && d.dup.Load() {
		d.calls.Add(2)
		d.clockScripter.EvalSha(ctx, sha, keys, args...)
	}
	return d.clockScripter.EvalSha(ctx, sha, keys, args...)
}

// failScripter is a clockScripter that fails every script call while
// down is set, as a Redis outage does.
type failScripter struct {
	clockScripter
	down atomic.Bool
}

func (f *failScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if f.down.Load() {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(errors.New("connection refused"))
		return cmd
	}
	return f.clockScripter.EvalSha(ctx, sha, keys, args...)
}

func (f *failScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return f.EvalSha(ctx, "", keys, args...)
}

// TestSettleOutage: a reservation made on Redis and settled during an
// outage fails with ErrUnavailable, its reserved cost standing, and
// settles on Redis once it is back; one made by the local fallback
// settles in the fallback, also once Redis is back.
func TestSettleOutage(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	clock := func() int64 { return now.UnixMicro() }
	rdb := &failScripter{clockScripter: clockScripter{Scripter: redistest.NewClient(t, redistest.Addr(t)), now: clock}}
	lim, err := New(rdb, WithPrefix(uniquePrefix()), WithTimeout(10*time.Second), WithBatching(0), WithFallbackReplicas(1))
	if err != nil {
		t.Fatal(err)
	}
	lim.now = clock
	rule, _ := lim.Prepare(PerHour(10))

	onRedis, _ := rule.Reserve(ctx, "k", 6)
	rdb.down.Store(true)
	if err := onRedis.Settle(ctx, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Settle during an outage = %v, want ErrUnavailable", err)
	}
	local, err := rule.Reserve(ctx, "k", 4)
	if err != nil || !local.Result.Allowed || !local.Result.Degraded {
		t.Fatalf("Reserve during an outage = %+v, %v; want admitted by the fallback", local, err)
	}
	rdb.down.Store(false)
	if err := onRedis.Settle(ctx, 1); err != nil {
		t.Fatalf("Settle once Redis is back = %v", err)
	}
	if got := remaining(t, rule, "k"); got != 9 {
		t.Fatalf("remaining on Redis = %d, want 9: 6 reserved, 5 refunded", got)
	}
	if err := local.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, rule, "k"); got != 9 {
		t.Fatalf("remaining on Redis after cancelling a fallback reservation = %d, want 9 (Redis never saw it)", got)
	}
	// The fallback's bucket got the refund: its shadow of Redis (6
	// charged) is all it holds, so 4 are left there.
	d := lim.local.take(rule.p.ID, "k", clock(), rule.p.local.ticks, 1, 0, 0)
	if d.Remaining != 3 {
		t.Fatalf("fallback remaining after taking 1 = %d, want 3", d.Remaining)
	}
}

// TestSettleEndsCachedDenial: a refund ends the deny cache's denial of the
// key at once; a charge does not touch it.
func TestSettleEndsCachedDenial(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	lim := newClockLimiter(t, redistest.Addr(t), &now, WithDenyCache(true))
	rule, _ := lim.Prepare(PerHour(3))
	rv, _ := rule.Reserve(ctx, "k", 3)
	if res, _ := rule.Allow(ctx, "k"); res.Allowed {
		t.Fatal("Allow on an empty bucket admitted")
	}
	if _, st, _ := lim.denies.check(rule.p.ID, "k", now.UnixMicro()); st != denyHit {
		t.Fatalf("deny cache state = %v, want a cached denial", st)
	}
	if err := rv.Settle(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, st, _ := lim.denies.check(rule.p.ID, "k", now.UnixMicro()); st == denyHit {
		t.Fatal("a refund left the cached denial")
	}
	for i := range 3 {
		res, err := rule.Allow(ctx, "k")
		if err != nil || res.Allowed != (i < 2) {
			t.Fatalf("Allow #%d after refunding 2 = %+v, %v", i, res, err)
		}
	}
}

// TestSettleAdmittedBound is the property: on a virtual clock, a client
// that reserves, settles with any final cost (up to one Burst above its
// estimate) and sends plain requests in between is admitted, over any
// time t from a full bucket, at most Burst + Rate·t/Period events plus one
// Burst (the largest single overshoot a settlement may add), counting
// each settled reservation at its final cost and an unsettled one at its
// estimate.
func TestSettleAdmittedBound(t *testing.T) {
	ctx := context.Background()
	limits := []Limit{PerSecond(10), {Rate: 7, Period: 1500 * time.Millisecond, Burst: 4}, PerMinute(30).WithBurst(5)}
	worst := 0.0
	for li, lt := range limits {
		for seed := range uint64(20) {
			r := rand.New(rand.NewPCG(seed, uint64(li)))
			start := time.Unix(1_800_000_000, 0)
			now := start
			lim, _ := NewMemory(WithClock(func() time.Time { return now }))
			rule, _ := lim.Prepare(lt)
			var admitted int64
			for step := range 2000 {
				now = now.Add(time.Duration(r.Int64N(int64(lt.Period) / int64(lt.Rate) * 2)))
				n := 1 + r.IntN(lt.Burst)
				if r.IntN(3) == 0 {
					res, _ := rule.AllowN(ctx, "k", n)
					if res.Allowed {
						admitted += int64(n)
					}
				} else {
					rv, err := rule.Reserve(ctx, "k", n)
					if err != nil {
						t.Fatal(err)
					}
					if rv.Result.Allowed {
						final := r.IntN(n + lt.Burst + 1)
						if r.IntN(10) == 0 {
							final = n // never settled: the estimate stands
						} else if err := rv.Settle(ctx, final); err != nil {
							t.Fatal(err)
						}
						admitted += int64(final)
					}
				}
				el := now.Sub(start)
				bound := float64(2*lt.Burst) + float64(lt.Rate)*el.Seconds()/lt.Period.Seconds()
				if float64(admitted) > bound {
					t.Fatalf("%v seed %d step %d: admitted %d over %v, bound %.1f", lt, seed, step, admitted, el, bound)
				}
				if el > 0 {
					worst = max(worst, float64(admitted)-(bound-float64(lt.Burst)))
				}
			}
		}
	}
	t.Logf("3 limits × 20 seeds × 2000 steps: admitted within Burst + rate·t + one Burst; the largest excess over Burst + rate·t was %.2f events", worst)
}

// TestSettleCountedBound is the property with reservations open side by
// side, on the model: settlements that overshoot at once may take a
// bucket past one Burst of debt, and what goes beyond it is forgiven
// (not charged), so the bound holds for the cost the bucket counted, in
// ticks, exactly: admitted less forgiven never exceeds 2·Burst + rate·t.
// It also reports how much was forgiven.
func TestSettleCountedBound(t *testing.T) {
	limits := []Limit{PerSecond(10), {Rate: 7, Period: 1500 * time.Millisecond, Burst: 4}, PerMinute(30).WithBurst(5)}
	var forgivenAll, admittedAll int64
	for li, lt := range limits {
		tl, err := compileLimit(lt)
		if err != nil {
			t.Fatal(err)
		}
		ticks := []tickLimit{tl}
		for seed := range uint64(20) {
			r := rand.New(rand.NewPCG(seed, uint64(li)+100))
			const start = 1_800_000_000_000_000
			now := int64(start)
			var b bucket
			var open []int64
			var admitted, forgiven int64 // in ticks
			for step := range 3000 {
				now += r.Int64N(int64(lt.Period/time.Microsecond) / int64(lt.Rate) * 2)
				if len(open) > 0 && r.IntN(2) == 0 {
					j := r.IntN(len(open))
					n := open[j]
					open = append(open[:j], open[j+1:]...)
					final := r.Int64N(n + tl.B + 1)
					debt := int64(0)
					if b.set {
						debt = max(0, (b.tats[0].us-now)*tl.R+b.tats[0].frac)
					}
					settleBucket(&b, now, ticks, final-n)
					after := int64(0)
					if b.set {
						after = max(0, (b.tats[0].us-now)*tl.R+b.tats[0].frac)
					}
					forgiven += max(0, debt+(final-n)*tl.P) - after // the cap's cut; 0 below it
					admitted += (final - n) * tl.P
				} else {
					n := 1 + r.Int64N(tl.B)
					if d, _ := stepBucket(&b, now, ticks, n, 0, 0); d.Allowed {
						admitted += n * tl.P
						open = append(open, n)
					}
				}
				if bound := 2*tl.Capacity() + (now-start)*tl.R; admitted-forgiven > bound {
					t.Fatalf("%v seed %d step %d: counted %d ticks, bound %d", lt, seed, step, admitted-forgiven, bound)
				}
			}
			forgivenAll += forgiven / tl.P
			admittedAll += admitted / tl.P
		}
	}
	t.Logf("3 limits × 20 seeds × 3000 steps: counted cost within 2·Burst + rate·t; %d of %d admitted events forgiven by the debt cap", forgivenAll, admittedAll)
}

// BenchmarkSettle is the extra cost of a settlement on a real Redis: a
// plain AllowN of 4, against Reserve of 4 then Settle with 2 (a refund),
// on one client and one key, one call at a time.
func BenchmarkSettle(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(b), ContextTimeoutEnabled: true, MaxRetries: -1})
	b.Cleanup(func() { rdb.Close() })
	lim, err := New(rdb, WithPrefix(uniquePrefix()), WithTimeout(10*time.Second), WithDenyCache(false))
	if err != nil {
		b.Fatal(err)
	}
	rule, _ := lim.Prepare(PerSecond(1 << 30).WithBurst(1 << 20))
	ctx := context.Background()
	b.Run("AllowN", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if res, err := rule.AllowN(ctx, "k", 4); err != nil || !res.Allowed {
				b.Fatal(res, err)
			}
		}
	})
	b.Run("Reserve+Settle", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rv, err := rule.Reserve(ctx, "k", 4)
			if err != nil || !rv.Result.Allowed {
				b.Fatal(rv, err)
			}
			if err := rv.Settle(ctx, 2); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Reserve", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if rv, err := rule.Reserve(ctx, "k", 4); err != nil || !rv.Result.Allowed {
				b.Fatal(rv, err)
			}
		}
	})
}

// TestMarkerKey: a marker shares its bucket's hash tag (so its slot) and
// can never be a bucket's name; Redis keeps it until the settle window's
// end plus markerMargin.
func TestMarkerKey(t *testing.T) {
	p, _ := newPlan([]Limit{PerSecond(1)}, nil)
	for _, key := range []string{"k", "a:b~c{x}", strings.Repeat("z", 200)} {
		rkey := redisstore.RedisKey("pre:", p.FP, key)
		m := redisstore.MarkerKey(rkey, "pre:", p.FP, "0123")
		tag := rkey[strings.IndexByte(rkey, '{') : strings.IndexByte(rkey, '}')+1]
		if want := "pre:" + tag + p.FP + "~0123"; m != want {
			t.Errorf("markerKey(%q) = %q, want %q", rkey, m, want)
		}
	}
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	addr := redistest.Addr(t)
	lim := newClockLimiter(t, addr, &now)
	rule, _ := lim.Prepare(PerSecond(10))
	rv, _ := rule.Reserve(ctx, "k", 3)
	if err := rv.Settle(ctx, 1); err != nil {
		t.Fatal(err)
	}
	rdb := redistest.NewClient(t, addr)
	m := redisstore.MarkerKey(redisstore.RedisKey(redisOf(lim).Prefix(), rule.p.FP, "k"), redisOf(lim).Prefix(), rule.p.FP, rv.id)
	if got, hi := rdb.PTTL(ctx, m).Val(), SettleWindow+markerMargin; got > hi || got < hi-5*time.Second {
		t.Fatalf("marker PTTL = %v, want about %v", got, hi)
	}
}

// TestSettleBucketDeepDebt: a refund on a bucket that a waiting
// reservation took far beyond one Burst of debt refunds exactly, and a
// charge there adds nothing.
func TestSettleBucketDeepDebt(t *testing.T) {
	tl, _ := compileLimit(PerSecond(10))
	ticks := []tickLimit{tl}
	const now = 1_800_000_000_000_000
	debt := func(b *bucket) int64 { return (b.tats[0].us-now)*tl.R + b.tats[0].frac }
	var b bucket
	stepBucket(&b, now, ticks, 10, 0, 0)
	if d, _ := stepBucket(&b, now, ticks, 10, 5_000_000, 0); !d.Allowed {
		t.Fatal("a 5 s wait was refused")
	}
	stepBucket(&b, now, ticks, 10, 5_000_000, 0)
	if got, want := debt(&b), 3*tl.Capacity(); got != want {
		t.Fatalf("debt = %d, want %d", got, want)
	}
	settleBucket(&b, now, ticks, -1)
	if got, want := debt(&b), 3*tl.Capacity()-tl.P; got != want {
		t.Fatalf("debt after refunding 1 = %d, want %d", got, want)
	}
	settleBucket(&b, now, ticks, 5)
	if got, want := debt(&b), 3*tl.Capacity()-tl.P; got != want {
		t.Fatalf("debt after charging 5 beyond the cap = %d, want %d (unchanged)", got, want)
	}
}
