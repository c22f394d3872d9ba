package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// shadowSets are the shadow limits the shadow tests draw from: one limit,
// several (each decided alone), a stepped one, and one with a burst below
// some requests' cost (such a request is a would-be denial, never an
// error).
var shadowSets = [][]Limit{
	{PerSecond(3)},
	{PerSecond(2).WithBurst(1), PerMinute(20)},
	{{Rate: 7, Period: 1500 * time.Millisecond, Burst: 4}, PerHour(50), PerSecond(8).WithName("eight")},
	{PerInterval(4, time.Second), PerSecond(5)},
	{PerMinute(6).WithBurst(2)},
}

// withShadows compiles limits into a plan with shadow limits shadow, as
// Rule.WithShadowLimits does, and returns it and the plan without them.
func withShadows(t *testing.T, limits, shadow []Limit) (with, without *plan) {
	t.Helper()
	with, err := newPlan(limits, nil)
	if err == nil {
		without, err = newPlan(limits, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	sps := make([]*plan, len(shadow))
	for i, l := range shadow {
		if sps[i], err = newPlan([]Limit{l}, nil); err != nil {
			t.Fatal(err)
		}
		sps[i].markShadow()
	}
	with.setShadow(sps, &shadowSet{limits: shadow, all: uint8(1<<len(shadow) - 1)})
	return with, without
}

// shadowModel is the Go model of decisions with shadow limits: each
// bucket, enforced or shadow, a stepBucket of its own by stored name.
type shadowModel map[string]*bucket

// decide decides c as the script should: its own limits, then each shadow
// limit alone without a penalty, folded into one decision.
func (m shadowModel) decide(c *redisstore.Query, now int64) decision {
	step := func(rkey string, ticks []tickLimit, penalty int64) decision {
		b := m[rkey]
		if b == nil {
			b = &bucket{}
			m[rkey] = b
		}
		d, _ := stepBucket(b, now, ticks, c.Cost, c.MaxWait, penalty)
		return d
	}
	d := step(c.RKey, c.Plan.Ticks, c.Penalty)
	for i, rkey := range c.ShadowRKeys() {
		d.AddShadow(i, step(rkey, c.Plan.Shadow[i].Ticks, 0))
	}
	return d
}

// shadowQuery returns the query of step s on key under p, its buckets
// named under prefix.
func shadowQuery(prefix, key string, p *plan, s diffStep, now int64) *redisstore.Query {
	c := &redisstore.Query{Key: key, Plan: &p.Plan, Cost: min(s.cost, p.minB), MaxWait: s.maxWait, Penalty: s.penalty, Now: now}
	c.SetRKey(redisstore.RedisKey(prefix, p.FP, key))
	c.SetShadows(func(fp string) string { return redisstore.RedisKey(prefix, fp, key) })
	return c
}

// runShadowCalls decides calls in one script call on rdb at now (through
// injectedTimeScript): alone in a lone call's form, several in the batch
// form.
func runShadowCalls(ctx context.Context, rdb redis.Scripter, calls []*redisstore.Query, now int64) ([]decision, error) {
	if len(calls) == 1 {
		keys, args := calls[0].Lone()
		vals, err := injectedTimeScript.Run(ctx, rdb, keys, append(slices.Clip(args), now)...).Int64Slice()
		if err != nil {
			return nil, err
		}
		d, err := calls[0].Decode(vals)
		return []decision{d}, err
	}
	keys, args := redisstore.ScriptArgs(calls)
	vals, err := injectedTimeScript.Run(ctx, rdb, keys, append(args, now)...).Int64Slice()
	if err != nil {
		return nil, err
	}
	ds, errs := redisstore.DecodeBatch(calls, vals)
	return ds, errors.Join(errs...)
}

// TestShadowDifferential runs random sequences of decisions with shadow
// limits on a real Redis, through the shipped script on a virtual clock,
// against the Go model, and each one again on other buckets without the
// shadow limits. At every step the script's decision, shadow limits
// included, is the model's; the decision without them is the same but
// for the shadow fields; and the would-be denials counted per shadow
// limit are the model's. A third of the steps decide two or three keys
// in one call (the batch form).
func TestShadowDifferential(t *testing.T) {
	const seqs, perSeq = 6, 700
	rdb := redistest.NewClient(t, redistest.Addr(t))
	ctx := context.Background()
	const base = 1_800_000_000_000_000
	total, shadowDecided := 0, 0
	for seq := range seqs {
		r := rand.New(rand.NewPCG(uint64(seq)+1, 51))
		with, without := make([]*plan, len(diffPlans)), make([]*plan, len(diffPlans))
		for i, ls := range diffPlans {
			with[i], without[i] = withShadows(t, ls, shadowSets[(i+seq)%len(shadowSets)])
		}
		pre := fmt.Sprintf("sluicetest:shadow:%d:%d:", time.Now().UnixNano(), seq)
		model := shadowModel{}
		wouldDeny, modelDeny := map[string]int{}, map[string]int{}
		now := base + int64(seq)*10*3600_000_000
		steps := genSteps(r, perSeq)
		for i := 0; i < len(steps); {
			now += steps[i].dt
			n := 1
			if r.IntN(3) == 0 {
				n = min(2+r.IntN(2), len(steps)-i)
			}
			var calls, bare []*redisstore.Query
			var wants []decision
			for _, s := range steps[i : i+n] {
				key := fmt.Sprintf("k%d", s.key)
				c := shadowQuery(pre+"s:", key, with[s.plan], s, now)
				calls = append(calls, c)
				bare = append(bare, shadowQuery(pre+"b:", key, without[s.plan], s, now))
				wants = append(wants, model.decide(c, now))
			}
			got, err := runShadowCalls(ctx, rdb, calls, now)
			if err != nil {
				t.Fatalf("seq %d step %d: %v", seq, i, err)
			}
			gotBare, err := runShadowCalls(ctx, rdb, bare, now)
			if err != nil {
				t.Fatalf("seq %d step %d, without shadow limits: %v", seq, i, err)
			}
			for j, c := range calls {
				// The script's clock is the test's (the injected now);
				// the model says nothing of when it decided.
				if got[j].At != now || gotBare[j].At != now {
					t.Fatalf("seq %d step %d: the script decided at %d and %d, want %d", seq, i+j, got[j].At, gotBare[j].At, now)
				}
				got[j].At, gotBare[j].At = 0, 0
				if got[j] != wants[j] {
					t.Fatalf("seq %d step %d (%+v, limits %v, shadow %v): script = %+v, model = %+v", seq, i+j, steps[i+j], with[steps[i+j].plan].limits, with[steps[i+j].plan].shadows.limits, got[j], wants[j])
				}
				plain := got[j]
				plain.Shadow, plain.ShadowNext = 0, 0
				if gotBare[j] != plain {
					t.Fatalf("seq %d step %d: without shadow limits %+v, with them %+v", seq, i+j, gotBare[j], got[j])
				}
				for k, l := range with[steps[i+j].plan].shadows.limits {
					name := fmt.Sprintf("%d/%v", steps[i+j].plan, l)
					if got[j].Shadow&(1<<k) != 0 {
						wouldDeny[name]++
					}
					if wants[j].Shadow&(1<<k) != 0 {
						modelDeny[name]++
					}
				}
				shadowDecided += len(c.ShadowRKeys())
			}
			total += n
			i += n
		}
		if fmt.Sprint(wouldDeny) != fmt.Sprint(modelDeny) || len(wouldDeny) == 0 {
			t.Fatalf("seq %d: would-be denials per shadow limit %v, model %v", seq, wouldDeny, modelDeny)
		}
		if seq == 0 {
			t.Logf("would-be denials per plan/shadow limit, sequence 0: %v", wouldDeny)
		}
	}
	t.Logf("%d decisions (%d shadow-limit decisions) identical to the model, and to the same decisions without shadow limits", total, shadowDecided)
}

// shadowRules prepares on lim a rule of each of diffPlans' limit sets,
// with shadow limits from shadowSets if shadow is set; the last one
// with a penalty lock, given after the shadow limits (which it keeps).
func shadowRules(t *testing.T, lim *Limiter, shadow bool) []*Rule {
	t.Helper()
	rules := make([]*Rule, len(diffPlans))
	for i, ls := range diffPlans {
		r, err := lim.Prepare(ls...)
		if err == nil && shadow {
			r, err = r.WithShadowLimits(shadowSets[i%len(shadowSets)]...)
		}
		if err == nil && i == len(diffPlans)-1 {
			r, err = r.WithPenalty(2 * time.Second)
		}
		if err != nil {
			t.Fatal(err)
		}
		rules[i] = r
	}
	return rules
}

// TestShadowLimiter runs random requests through three limiters on one
// virtual clock: on a real Redis with shadow limits, on a real Redis
// without them, and in memory (NewMemory) with them. The Redis limiters'
// results are identical but for Result.Shadow (shadow limits change no
// admission, and the deny cache answers as it would without them), and
// each request's would-be denials are the memory limiter's (the model),
// deny-cache answers included, so the counts per shadow limit are exact.
func TestShadowLimiter(t *testing.T) {
	addr := redistest.Addr(t)
	now := time.Unix(1_800_000_000, 0)
	rec := newRecorder()
	with := newClockLimiter(t, addr, &now, WithObserver(rec))
	without := newClockLimiter(t, addr, &now)
	mem, err := NewMemory(WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*Limiter{with, without, mem} {
		t.Cleanup(func() { l.Close() })
	}
	rw, rn, rm := shadowRules(t, with, true), shadowRules(t, without, false), shadowRules(t, mem, true)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 51))
	counts, modelCounts := map[string]int{}, map[string]int{}
	const n = 4000
	for i, s := range genSteps(r, n) {
		now = now.Add(time.Duration(s.dt) * time.Microsecond)
		key := fmt.Sprintf("tenant:%d", s.key)
		cost := int(min(s.cost, 3))
		if int64(cost) > rw[s.plan].p.minB {
			cost = 1
		}
		a, errA := rw[s.plan].AllowN(ctx, key, cost)
		b, errB := rn[s.plan].AllowN(ctx, key, cost)
		m, errM := rm[s.plan].AllowN(ctx, key, cost)
		if err := errors.Join(errA, errB, errM); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		plain := a
		plain.Shadow = Shadows{}
		if plain != b {
			t.Fatalf("step %d (%+v): with shadow limits %+v, without %+v", i, s, a, b)
		}
		if a.Allowed != m.Allowed || a.Shadow.Len() != m.Shadow.Len() || a.Shadow.Len() != len(shadowSets[s.plan%len(shadowSets)]) {
			t.Fatalf("step %d (%+v): Redis %+v, memory %+v", i, s, a, m)
		}
		for j := range a.Shadow.Len() {
			if a.Shadow.Denied(j) != m.Shadow.Denied(j) || a.Shadow.Limit(j) != m.Shadow.Limit(j) {
				t.Fatalf("step %d (%+v): shadow limit %v: Redis would deny %v, memory %v", i, s, a.Shadow.Limit(j), a.Shadow.Denied(j), m.Shadow.Denied(j))
			}
			name := fmt.Sprintf("%d/%v", s.plan, a.Shadow.Limit(j))
			if a.Shadow.Denied(j) {
				counts[name]++
			}
			if m.Shadow.Denied(j) {
				modelCounts[name]++
			}
		}
	}
	rec.mu.Lock()
	fromCache := rec.bySource[SourceDenyCache]
	rec.mu.Unlock()
	if fromCache == 0 {
		t.Fatal("the deny cache answered no request: its shadow answers were not tested")
	}
	if fmt.Sprint(counts) != fmt.Sprint(modelCounts) || len(counts) == 0 {
		t.Fatalf("would-be denials per shadow limit: Redis %v, memory %v", counts, modelCounts)
	}
	t.Logf("%d requests; would-be denials per plan/shadow limit, exact against the memory model: %v; %d of them answered by the deny cache", n, counts, fromCache)
}

// TestShadowOneCommandPerDecision counts the commands a private Redis
// executes for decisions with two shadow limits: one EVALSHA per
// decision still, and inside it TIME once, a GET per bucket, and no more
// SETs than buckets.
func TestShadowOneCommandPerDecision(t *testing.T) {
	srv := redistest.Start(t)
	lim := newRedisLimiter(t, srv.Addr())
	ctx := context.Background()
	r, err := lim.Prepare(PerSecond(1000))
	if err == nil {
		r, err = r.WithShadowLimits(PerSecond(10), PerMinute(100))
	}
	if err != nil {
		t.Fatal(err)
	}
	// The first call may load the script (EVALSHA, NOSCRIPT, EVAL).
	if _, err := r.Allow(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	redisOf(lim).WaitBackground() // the eviction policy's one read
	admin := redistest.NewClient(t, srv.Addr())
	before, err := redistest.CommandCalls(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	const n, buckets = 300, 3
	shadowDenied := 0
	for i := range n {
		res, err := r.AllowN(ctx, fmt.Sprintf("k%d", i%7), 1+i%2)
		if err != nil || !res.Allowed || res.Shadow.Len() != 2 {
			t.Fatalf("decision %d: %+v, %v; want admitted, two shadow limits decided", i, res, err)
		}
		if res.Shadow.AnyDenied() {
			shadowDenied++
		}
	}
	after, err := redistest.CommandCalls(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	delta := map[string]int64{}
	for cmd, c := range after {
		if d := c - before[cmd]; d != 0 && cmd != "info" {
			delta[cmd] = d
		}
	}
	t.Logf("command deltas for %d decisions with two shadow limits (%d would be denied by one): %v", n, shadowDenied, delta)
	if delta["evalsha"] != n || delta["time"] != n || delta["get"] != n*buckets {
		t.Fatalf("evalsha %d, time %d, get %d; want %d, %d, %d", delta["evalsha"], delta["time"], delta["get"], n, n, n*buckets)
	}
	if shadowDenied == 0 {
		t.Fatal("no shadow limit would have denied: the shadow buckets were not charged")
	}
	for cmd, d := range delta {
		switch cmd {
		case "evalsha", "time", "get", "set", "pttl":
			if d > n*buckets {
				t.Fatalf("%s calls = %d, more than one per bucket and decision", cmd, d)
			}
		default:
			t.Fatalf("unexpected command %s (%d calls)", cmd, d)
		}
	}
}

// TestShadowBucketsApart: a shadow limit equal to the rule's own limit, in
// the same scope, is a bucket of its own. Were it the same bucket, the
// rule would admit half as many.
func TestShadowBucketsApart(t *testing.T) {
	for _, tc := range []struct {
		name string
		lim  func(t *testing.T) *Limiter
	}{
		{"memory", func(t *testing.T) *Limiter { return memoryLimiter(t) }},
		{"redis", func(t *testing.T) *Limiter { return newRedisLimiter(t, redistest.Addr(t)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := tc.lim(t)
			r, err := lim.PrepareScoped("search", PerMinute(4))
			if err == nil {
				r, err = r.WithShadowLimits(PerMinute(4), PerMinute(2))
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for range 6 {
				res, err := r.Allow(context.Background(), "k")
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, fmt.Sprintf("%v/%v/%v", res.Allowed, res.Shadow.Denied(0), res.Shadow.Denied(1)))
			}
			want := "[true/false/false true/false/false true/false/true true/false/true false/true/true false/true/true]"
			if fmt.Sprint(got) != want {
				t.Fatalf("admitted/shadow 0 denies/shadow 1 denies: %v, want %v", got, want)
			}
			// The rule without its shadow limits draws on the same
			// buckets, which its shadow never charged.
			bare, _ := lim.PrepareScoped("search", PerMinute(4))
			if res, _ := bare.Allow(context.Background(), "k"); res.Allowed || res.Shadow.Len() != 0 {
				t.Fatalf("the bare rule: %+v, want denied, no shadow limits", res)
			}
		})
	}
}

// memoryLimiter returns a NewMemory limiter closed with the test.
func memoryLimiter(t *testing.T) *Limiter {
	t.Helper()
	lim, err := NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

// deadRedis returns a client to a loopback address nothing listens on.
func deadRedis(t *testing.T) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestShadowFallback: while Redis is unavailable, the local fallback
// decides shadow limits as it decides the rule's own, under each
// replica's share, marked Degraded; under FailOpen none is decided.
func TestShadowFallback(t *testing.T) {
	ctx := context.Background()
	quiet := WithLogger(slog.New(slog.DiscardHandler))
	t.Run("local", func(t *testing.T) {
		lim, err := New(deadRedis(t), quiet, WithFallbackReplicas(2))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		r, err := lim.Prepare(PerMinute(100))
		if err == nil {
			r, err = r.WithShadowLimits(PerMinute(4), PerMinute(100))
		}
		if err != nil {
			t.Fatal(err)
		}
		var denied []bool
		for range 4 {
			res, err := r.Allow(ctx, "k")
			if err != nil || !res.Degraded || !res.Allowed || res.Shadow.Len() != 2 || res.Shadow.Denied(1) {
				t.Fatalf("%+v, %v: want admitted by the fallback, two shadow limits decided", res, err)
			}
			denied = append(denied, res.Shadow.Denied(0))
		}
		// Each of two replicas has a share of 2 of PerMinute(4).
		if fmt.Sprint(denied) != "[false false true true]" {
			t.Fatalf("PerMinute(4) would deny %v, want [false false true true] (a share of 2)", denied)
		}
	})
	t.Run("fail open", func(t *testing.T) {
		lim, err := New(deadRedis(t), quiet, WithFailurePolicy(FailOpen))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		r, _ := lim.Prepare(PerMinute(100))
		r, err = r.WithShadowLimits(PerMinute(1))
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if res, err := r.Allow(ctx, "k"); err != nil || !res.Allowed || res.Shadow.Len() != 0 {
				t.Fatalf("%+v, %v: want admitted, no shadow limit decided", res, err)
			}
		}
	})
}

// TestShadowLimitsOption: WithShadowLimits checks its limits, keeps the
// rule's modes and is kept by them, replaces or removes shadow limits,
// and refuses token leases.
func TestShadowLimitsOption(t *testing.T) {
	lim := newRedisLimiter(t, redistest.Addr(t))
	base, err := lim.Prepare(PerSecond(10))
	if err != nil {
		t.Fatal(err)
	}
	nine := make([]Limit, 9)
	for i := range nine {
		nine[i] = PerSecond(i + 1)
	}
	for _, tc := range []struct {
		name   string
		limits []Limit
		err    string
	}{
		{"nine", nine, "9 shadow limits, at most 8"},
		{"invalid", []Limit{PerSecond(1), {Rate: 0, Period: time.Second, Burst: 1}}, "shadow limit 1"},
	} {
		if _, err := base.WithShadowLimits(tc.limits...); !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want ErrInvalidLimit saying %q", tc.name, err, tc.err)
		}
	}
	r, err := base.WithShadowLimits(PerSecond(1), PerMinute(5))
	if err == nil {
		r, err = r.DryRun()
	}
	if err == nil {
		r, err = r.WithEnforce(0.5)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := r.ShadowLimits(); fmt.Sprint(got) != fmt.Sprint([]Limit{PerSecond(1), PerMinute(5)}) {
		t.Fatalf("after DryRun and WithEnforce: shadow limits %v", got)
	}
	if base.ShadowLimits() != nil {
		t.Fatal("WithShadowLimits changed the rule it was called on")
	}
	if _, err := r.WithTokenLeases(LeaseBound{Fraction: 0.1}); !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("WithTokenLeases on a rule with shadow limits: %v, want ErrInvalidLimit", err)
	}
	none, err := r.WithShadowLimits()
	if err != nil || none.ShadowLimits() != nil || none.Enforced("k") != r.Enforced("k") {
		t.Fatalf("WithShadowLimits(): %v, %v; want no shadow limits, the same canary", none.ShadowLimits(), err)
	}
	if res, err := none.Allow(context.Background(), "k"); err != nil || res.Shadow.Len() != 0 {
		t.Fatalf("without shadow limits: %+v, %v", res, err)
	}
}

// TestShadowForeignValue: a shadow bucket's name holding another
// program's value fails nothing (the decision stands, that shadow limit
// denying nothing); the rule's own bucket holding one is decided as it
// is without shadow limits.
func TestShadowForeignValue(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Addr(t)
	lim := newRedisLimiter(t, addr, WithLogger(slog.New(slog.DiscardHandler)))
	rdb := redistest.NewClient(t, addr)
	base, _ := lim.Prepare(PerMinute(5))
	r, err := base.WithShadowLimits(PerMinute(1), PerMinute(1).WithName("second"))
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, redisOf(lim).RKey(r.p.shadow[0].FP, "k"), "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		res, err := r.Allow(ctx, "k")
		if err != nil || !res.Allowed || res.Degraded || res.Shadow.Len() != 2 || res.Shadow.Denied(0) || res.Shadow.Denied(1) != (i == 1) {
			t.Fatalf("request %d: %+v, %v; want admitted by Redis, the foreign shadow bucket denying nothing, the other denying the second", i+1, res, err)
		}
	}
	if err := rdb.HSet(ctx, redisOf(lim).RKey(r.p.FP, "j"), "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	a, errA := r.Allow(ctx, "j")
	if err := rdb.HSet(ctx, redisOf(lim).RKey(r.p.FP, "i"), "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	b, errB := base.Allow(ctx, "i")
	if (errA == nil) != (errB == nil) || a.Allowed != b.Allowed || a.Degraded != b.Degraded {
		t.Fatalf("the rule's bucket foreign: with shadow limits %+v, %v; without %+v, %v", a, errA, b, errB)
	}
}
