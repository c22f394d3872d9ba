package core

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/internal/testkit"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/redistest"
)

// timeLines are the script's clock. injectedTimeScript, the test variant
// of the script, replaces them with an instant passed as an extra last
// argument (and removed from ARGV before the script reads it), so that its
// arithmetic can be compared with the model step by step on a virtual
// clock, on a real Redis. A real Redis expires keys on its own clock, which
// runs faster than the virtual one between close steps, so the variant
// stretches every expiry by an hour (expiryStretch); and it records each
// expiry as the shipped script computes it, in milliseconds, under the
// key's name plus pxSuffix, so that the differential test can compare
// expiries with the model exactly. Everything else in the script is run as
// shipped.
const timeLines = "local t = call('TIME')\nlocal now = t[1] * 1000000 + t[2]\n"

// expiryExprs are the script's expiries in milliseconds: on the one-limit
// path and on the several-limit path. Each ends a call('SET', key, ...).
var expiryExprs = []string{"'PX', format('%d', (ttl + (-ttl) % 1000) / 1000))", "'PX', ceildiv(ttl, 1000))"}

const (
	// expiryStretch is what injectedTimeScript adds to every expiry.
	expiryStretch = time.Hour
	// pxSuffix names the key where injectedTimeScript records a key's
	// last expiry.
	pxSuffix = "|px"
)

var injectedTimeScript = func() *redis.Script {
	if !strings.Contains(redisstore.BucketLua, timeLines) {
		panic("bucket.lua no longer reads TIME as the test expects")
	}
	src := strings.Replace(redisstore.BucketLua, timeLines, "local now = argv[#argv] + 0\nargv[#argv] = nil\n", 1)
	for _, e := range expiryExprs {
		if !strings.Contains(src, e) {
			panic("bucket.lua no longer sets PX as the test expects: " + e)
		}
		px := strings.TrimSuffix(strings.TrimPrefix(e, "'PX', "), ")")
		src = strings.ReplaceAll(src, e, fmt.Sprintf("'PX', %s + %d) call('SET', key .. '%s', %s, 'PX', %[2]d)",
			px, expiryStretch.Milliseconds(), pxSuffix, px))
	}
	return redis.NewScript(src)
}()

// clockScripter is a redis.Scripter for a limiter or store on a real Redis
// that decides on the test's clock: it runs the bucket script as
// injectedTimeScript and the settle script as injectedSettleScript at the
// instant now returns (unix microseconds), and passes every other command
// through.
type clockScripter struct {
	redis.Scripter
	now func() int64
}

func (c clockScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha == redisstore.SettleScript.Hash() {
		return injectedSettleScript.Run(ctx, c.Scripter, keys, append(slices.Clip(args), c.now())...)
	}
	if sha == redisstore.PathScript.Hash() {
		return injectedPathScript.Run(ctx, c.Scripter, keys, append(slices.Clip(args), c.now())...)
	}
	if sha != redisstore.BucketScript.Hash() {
		return c.Scripter.EvalSha(ctx, sha, keys, args...)
	}
	return injectedTimeScript.Run(ctx, c.Scripter, keys, append(slices.Clip(args), c.now())...)
}

func (c clockScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	if script == redisstore.SettleLua {
		return injectedSettleScript.Run(ctx, c.Scripter, keys, append(slices.Clip(args), c.now())...)
	}
	if script == redisstore.PathLua {
		return injectedPathScript.Run(ctx, c.Scripter, keys, append(slices.Clip(args), c.now())...)
	}
	if script != redisstore.BucketLua {
		return c.Scripter.Eval(ctx, script, keys, args...)
	}
	return injectedTimeScript.Run(ctx, c.Scripter, keys, append(slices.Clip(args), c.now())...)
}

// clockPipeliner is clockScripter for a pipeline: the bucket script's
// calls are queued as injectedTimeScript's, and the settle script's as
// injectedSettleScript's, at the instant now returns.
type clockPipeliner struct {
	redis.Pipeliner
	now func() int64
}

func (p clockPipeliner) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha == redisstore.SettleScript.Hash() {
		return injectedSettleScript.EvalSha(ctx, p.Pipeliner, keys, append(slices.Clip(args), p.now())...)
	}
	if sha == redisstore.PathScript.Hash() {
		return injectedPathScript.EvalSha(ctx, p.Pipeliner, keys, append(slices.Clip(args), p.now())...)
	}
	if sha != redisstore.BucketScript.Hash() {
		return p.Pipeliner.EvalSha(ctx, sha, keys, args...)
	}
	return injectedTimeScript.EvalSha(ctx, p.Pipeliner, keys, append(slices.Clip(args), p.now())...)
}

func (p clockPipeliner) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	if script == redisstore.SettleLua {
		return injectedSettleScript.Eval(ctx, p.Pipeliner, keys, append(slices.Clip(args), p.now())...)
	}
	if script == redisstore.PathLua {
		return injectedPathScript.Eval(ctx, p.Pipeliner, keys, append(slices.Clip(args), p.now())...)
	}
	if script != redisstore.BucketLua {
		return p.Pipeliner.Eval(ctx, script, keys, args...)
	}
	return injectedTimeScript.Eval(ctx, p.Pipeliner, keys, append(slices.Clip(args), p.now())...)
}

// newClockLimiter returns a limiter on the real Redis at addr that decides
// on the clock *now, in Redis through injectedTimeScript and in its own
// deny cache and breaker, with a prefix private to the test and a time
// budget far above any scheduling delay.
func newClockLimiter(t *testing.T, addr string, now *time.Time, opts ...Option) *Limiter {
	t.Helper()
	clock := func() int64 { return now.UnixMicro() }
	rdb := clockScripter{Scripter: redistest.NewClient(t, addr), now: clock}
	opts = append([]Option{WithPrefix(uniquePrefix()), WithTimeout(10 * time.Second)}, opts...)
	lim, err := New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lim.now = clock
	return lim
}

// uniquePrefix returns a key prefix no other limiter uses, short enough
// for WithPrefix whatever the test's name.
func uniquePrefix() string {
	return fmt.Sprintf("sluicetest:%x:", time.Now().UnixNano())
}

// diffPlans are the limit sets the differential test draws from: whole and
// fractional emission intervals, several limits on one key, a slow bucket.
var diffPlans = [][]Limit{
	{PerSecond(5)},
	{{Rate: 7, Period: 1500 * time.Millisecond, Burst: 4}},
	{PerSecond(10).WithBurst(3), PerMinute(40)},
	{PerHour(100)},
	{{Rate: 1000, Period: time.Second, Burst: 50}},
	{{Rate: 3, Period: time.Second, Burst: 1}, {Rate: 11, Period: 7 * time.Second, Burst: 6}},
}

type diffStep struct {
	dt                     int64 // microseconds since the previous step
	key, plan              int
	cost, maxWait, penalty int64
}

func genSteps(r *rand.Rand, n int) []diffStep {
	steps := make([]diffStep, n)
	for i := range steps {
		s := &steps[i]
		switch x := r.IntN(100); {
		case x < 30:
		case x < 50:
			s.dt = r.Int64N(1000)
		case x < 80:
			s.dt = r.Int64N(300_000)
		case x < 95:
			s.dt = r.Int64N(5_000_000)
		default:
			s.dt = r.Int64N(2 * 3600_000_000)
		}
		s.key = r.IntN(3)
		s.plan = r.IntN(len(diffPlans))
		s.cost = 1
		if r.IntN(4) == 0 {
			s.cost = 1 + r.Int64N(3)
		}
		if r.IntN(5) == 0 {
			s.maxWait = r.Int64N(2_000_000)
		}
		if r.IntN(10) == 0 {
			s.penalty = 1 + r.Int64N(3_000_000)
		}
	}
	return steps
}

// decideFunc decides one call at virtual time now (microseconds).
type decideFunc func(ctx context.Context, c *redisstore.Query, now int64) (decision, error)

// TestDifferential runs random sequences against the reference model and a
// real Redis, through injectedTimeScript on a virtual clock, and requires
// identical decisions and identical expiries at every step: the expiry the
// script computed, exactly, and the key's PTTL, within a second of it
// (plus the variant's stretch) for the time the test takes to ask.
func TestDifferential(t *testing.T) {
	const seqs, perSeq = 10, 1000
	plans := make([]*plan, len(diffPlans))
	for i, ls := range diffPlans {
		p, err := newPlan(ls, nil)
		if err != nil {
			t.Fatal(err)
		}
		plans[i] = p
	}
	const base = 1_800_000_000_000_000 // a 2027 instant, in microseconds
	rdb := redistest.NewClient(t, redistest.Addr(t))
	runDifferential(t, plans, seqs, perSeq, base, func(ctx context.Context, c *redisstore.Query, now int64) (decision, error) {
		args := c.AppendArgs(nil)
		args = append(args, now)
		vals, err := injectedTimeScript.Run(ctx, rdb, []string{c.RKey}, args...).Int64Slice()
		if err != nil {
			return decision{}, err
		}
		return decodeOne(c, vals)
	}, func(ctx context.Context, rkey string, want time.Duration) error {
		var px *redis.StringCmd
		var pttl *redis.DurationCmd
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			px, pttl = p.Get(ctx, rkey+pxSuffix), p.PTTL(ctx, rkey)
			return nil
		}); err != nil {
			return err
		}
		ms, err := px.Int64()
		if err != nil {
			return err
		}
		if got := time.Duration(ms) * time.Millisecond; got != want {
			return fmt.Errorf("expiry set %v, want %v", got, want)
		}
		if got, hi := pttl.Val(), want+expiryStretch; got > hi || got < hi-time.Second {
			return fmt.Errorf("PTTL = %v, want within [%v, %v]", got, hi-time.Second, hi)
		}
		return nil
	})
}

// runDifferential runs seqs random sequences of perSeq steps through run
// and the model, and compares every decision; after each step that wrote,
// it gives checkTTL the key's stored name and the expiry the model wants.
func runDifferential(t *testing.T, plans []*plan, seqs, perSeq int, base int64, run decideFunc, checkTTL func(ctx context.Context, rkey string, want time.Duration) error) {
	t.Helper()
	ctx := context.Background()
	prefix := fmt.Sprintf("sluicetest:%d:", time.Now().UnixNano())
	total := 0
	for seq := range seqs {
		seed := uint64(seq) + 1
		r := rand.New(rand.NewPCG(seed, 42))
		model := map[string]*bucket{}
		now := base + int64(seq)*10*3600_000_000
		for i, s := range genSteps(r, perSeq) {
			now += s.dt
			p := plans[s.plan]
			cost := min(s.cost, p.minB)
			c := redisstore.Query{
				Key:     fmt.Sprintf("k%d", s.key),
				Plan:    &p.Plan,
				Cost:    cost,
				MaxWait: s.maxWait,
				Penalty: s.penalty,
			}
			c.RKey = redisstore.RedisKey(fmt.Sprintf("%s%d:", prefix, seq), p.FP, c.Key)
			c.SetRKey(c.RKey)
			b := model[c.RKey]
			if b == nil {
				b = &bucket{}
				model[c.RKey] = b
			}
			want, wrote := stepBucket(b, now, p.Ticks, c.Cost, c.MaxWait, c.Penalty)
			got, err := run(ctx, &c, now)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, i, err)
			}
			if got != want {
				t.Fatalf("seed %d step %d (%+v, limits %v): store = %+v, model = %+v", seed, i, s, p.limits, got, want)
			}
			if wrote {
				wantTTL := time.Duration(ceilDiv(b.ttl(now, p.Ticks), 1000)) * time.Millisecond
				if err := checkTTL(ctx, c.RKey, wantTTL); err != nil {
					t.Fatalf("seed %d step %d (%+v, limits %v): %v", seed, i, s, p.limits, err)
				}
			}
			total++
		}
	}
	t.Logf("%d sequences, %d decisions and their expiries identical to the model", seqs, total)
}

// newRedisLimiter returns a limiter on a fresh client to addr with a prefix
// private to the test and a time budget far above any scheduling delay:
// these tests are about Redis's answers, not about degradation.
func newRedisLimiter(t *testing.T, addr string, opts ...Option) *Limiter {
	t.Helper()
	rdb := redistest.NewClient(t, addr)
	opts = append([]Option{
		WithPrefix(fmt.Sprintf("sluicetest:%s:%d:", t.Name(), time.Now().UnixNano())),
		WithTimeout(10 * time.Second),
		// A fixed fallback share: the implicit fleet's heartbeat, one
		// script call a second, would be counted by the tests that count
		// a decision's calls (TestImplicitFleetSizesTheFallback tests it).
		WithFallbackReplicas(1),
	}, opts...)
	lim, err := New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestConcurrentExact hammers one key from 4 limiter instances with 32
// goroutines each against a real Redis: admissions stay within one token of
// the ideal burst + rate*elapsed and reach at least 99% of it, less what a
// perfect bucket would also lose while full. A loaded machine starves the
// callers: all of them at once (no request reaches Redis), or all but a
// few, which then offer less than the rate, and the bucket fills. Either
// way a full bucket discards what it would refill, whatever the limiter.
//
// What a perfect bucket could lose is bounded from the denials: a denial
// shows the bucket empty at some instant between its send and its return,
// and between two instants when it was empty a bucket loses nothing until
// it has had time to fill.
func TestConcurrentExact(t *testing.T) {
	if testing.Short() {
		t.Skip("3 s load test")
	}
	addr := redistest.Addr(t)
	limit := Limit{Rate: 2000, Period: time.Second, Burst: 100}
	prefix := WithPrefix(fmt.Sprintf("sluicetest:conc:%d:", time.Now().UnixNano()))
	var lims [4]*Limiter
	for i := range lims {
		// The deny cache answers denials locally in ~200ns, so these
		// unpaced loops would spin and starve the goroutines carrying
		// Redis's answers; this test is about Redis's arithmetic. The
		// cache's own accuracy is checked by TestFlood with paced callers.
		lims[i] = newRedisLimiter(t, addr, prefix, WithDenyCache(false))
	}
	var admitted, offered, errs atomic.Int64
	ctx := context.Background()
	// Dial every pooled connection and load the script first, so the
	// measured window holds decisions, not connection setup.
	var warm sync.WaitGroup
	for i := range 4 * 32 {
		warm.Add(1)
		go func(lim *Limiter) {
			defer warm.Done()
			if _, err := lim.Allow(ctx, "warm", limit); err != nil {
				errs.Add(1)
			}
		}(lims[i%4])
	}
	warm.Wait()
	start := time.Now()
	stop := start.Add(3 * time.Second)
	var wg sync.WaitGroup
	var lastMu sync.Mutex
	var last time.Time
	type span struct{ sent, back time.Time }
	denials := make([][]span, 4*32)
	for i := range 4 * 32 {
		wg.Add(1)
		go func(lim *Limiter) {
			defer wg.Done()
			for time.Now().Before(stop) {
				sent := time.Now()
				res, err := lim.Allow(ctx, "hot", limit)
				back := time.Now()
				offered.Add(1)
				if err != nil || res.Degraded {
					errs.Add(1)
					continue
				}
				if res.Allowed {
					admitted.Add(1)
				} else {
					denials[i] = append(denials[i], span{sent, back})
				}
			}
			lastMu.Lock()
			if now := time.Now(); now.After(last) {
				last = now
			}
			lastMu.Unlock()
		}(lims[i%4])
	}
	wg.Wait()
	elapsed := last.Sub(start)
	ideal := float64(limit.Burst) + float64(limit.Rate)*elapsed.Seconds()
	got := float64(admitted.Load())
	// What a perfect bucket could have lost while full: between two
	// denials (empty instants, in order of return), at most the time from
	// the first's send to the second's return, less the time to fill.
	// Only denials that came back within sharp of their send are taken as
	// anchors, so that consecutive ones hardly overlap; leaving the others
	// out can only make the bound larger. The bucket starts full, as if it
	// had been empty one fill time before start; after the last empty
	// instant, everything that refilled may have gone untaken: what the
	// bucket holds at the end, and, when the tail outlasts the time to
	// fill (the callers stopped, or this process was paused, before the
	// last of them came back), what refilled beyond a full bucket.
	const sharp = 10 * time.Millisecond
	fill := time.Duration(limit.Burst) * limit.Period / time.Duration(limit.Rate)
	empties := []span{{start.Add(-fill), start.Add(-fill)}}
	for _, d := range denials {
		for _, sp := range d {
			if sp.back.Sub(sp.sent) <= sharp {
				empties = append(empties, sp)
			}
		}
	}
	slices.SortFunc(empties, func(a, b span) int { return a.back.Compare(b.back) })
	perSec := float64(limit.Rate) / limit.Period.Seconds()
	var lost float64
	for i := 1; i < len(empties); i++ {
		if gap := empties[i].back.Sub(empties[i-1].sent); gap > fill {
			lost += (gap - fill).Seconds() * perSec
		}
	}
	lost += last.Sub(empties[len(empties)-1].sent).Seconds() * perSec
	t.Logf("offered %d, admitted %d, ideal %.1f over %v (%.3f of ideal); a full bucket could lose %.0f",
		offered.Load(), admitted.Load(), ideal, elapsed, got/ideal, lost)
	if errs.Load() != 0 {
		t.Fatalf("%d errors or degraded decisions", errs.Load())
	}
	if got > ideal+1 {
		t.Fatalf("admitted %v > ideal %.1f + 1", got, ideal)
	}
	if got < 0.99*(ideal-lost) {
		t.Fatalf("admitted %v < 99%% of ideal %.1f less %.0f a full bucket could lose", got, ideal, lost)
	}
}

// TestNoStarvation sends one request a millisecond at a 500/s limit for 2 s:
// a refill that drops fractions (floor(delta*rate)) admits about a third of
// this; the exact bucket admits burst + 500*t. On a machine too loaded to
// offer that many, the floor is what an exact bucket admits of the
// requests as they were sent: the bucket replayed at each request's start
// and, apart, at its end (Redis decided it between the two), the lower of
// the two. (Before, the floor was 99% of the requests offered, which a
// client paused now and then, as under under-load --stall, and fast in
// between, could miss without any fault of the bucket: it is denied while
// it runs faster than the rate, and the pauses refill nothing it lost.)
func TestNoStarvation(t *testing.T) {
	if testing.Short() {
		t.Skip("2 s load test")
	}
	lim := newRedisLimiter(t, redistest.Addr(t))
	limit := PerSecond(500)
	ctx := context.Background()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var admitted, offered int
	var first, last time.Time
	var starts, ends []time.Time
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); <-tick.C {
		start := time.Now()
		res, err := lim.Allow(ctx, "steady", limit)
		if err != nil || res.Degraded {
			t.Fatalf("Allow = %+v, %v", res, err)
		}
		offered++
		now := time.Now()
		starts, ends = append(starts, start), append(ends, now)
		if first.IsZero() {
			first = now
		}
		last = now
		if res.Allowed {
			admitted++
		}
	}
	el := last.Sub(first)
	ideal := float64(limit.Burst) + 500*el.Seconds()
	exact := min(exactAdmits(starts, limit), exactAdmits(ends, limit))
	floor := 0.99 * float64(exact)
	t.Logf("offered %d, admitted %d, ideal %.1f over %v (%.3f); an exact bucket admits %d of them as sent", offered, admitted, ideal, el, float64(admitted)/ideal, exact)
	if float64(admitted) > ideal+1 || float64(admitted) < floor {
		t.Fatalf("admitted %d of %d, want within [%.1f, ideal %.1f + 1]", admitted, offered, floor, ideal)
	}
}

// exactAdmits replays an exact token bucket of limit, full at the first
// request, on requests made at the instants at: how many it admits.
func exactAdmits(at []time.Time, limit Limit) int {
	rate := float64(limit.Rate) / limit.Period.Seconds()
	tokens, n := float64(limit.Burst), 0
	for i, t := range at {
		if i > 0 {
			tokens = min(float64(limit.Burst), tokens+t.Sub(at[i-1]).Seconds()*rate)
		}
		if tokens >= 1 {
			tokens--
			n++
		}
	}
	return n
}

// TestSlowBucketRefill empties a 100-per-hour bucket and lets it idle two
// minutes: it has refilled 3 tokens, not been reset to 100 by an expiry.
// The two minutes pass on the test's clock, which Redis decides on.
func TestSlowBucketRefill(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	lim := newClockLimiter(t, redistest.Addr(t), &now)
	ctx := context.Background()
	limit := PerHour(100)
	for i := range 100 {
		if res, err := lim.Allow(ctx, "slow", limit); err != nil || !res.Allowed {
			t.Fatalf("request %d: %+v, %v", i, res, err)
		}
	}
	if res, _ := lim.Allow(ctx, "slow", limit); res.Allowed {
		t.Fatal("101st request admitted")
	}
	now = now.Add(2 * time.Minute)
	admitted := 0
	for range 100 {
		if res, err := lim.Allow(ctx, "slow", limit); err != nil {
			t.Fatal(err)
		} else if res.Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("after 2 idle minutes %d requests admitted, want 3", admitted)
	}
}

// TestOneCommandPerDecision counts the commands a private Redis executes:
// one EVALSHA per decision, and inside it only TIME, GET and SET.
func TestOneCommandPerDecision(t *testing.T) {
	srv := redistest.Start(t)
	lim := newRedisLimiter(t, srv.Addr())
	ctx := context.Background()
	limit := PerSecond(1000)
	// The first call may load the script (EVALSHA, NOSCRIPT, EVAL).
	if _, err := lim.Allow(ctx, "warm", limit); err != nil {
		t.Fatal(err)
	}
	redisOf(lim).WaitBackground() // the eviction policy's one read (INFO, perhaps on a new connection)
	admin := redistest.NewClient(t, srv.Addr())
	before, err := redistest.CommandCalls(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		if _, err := lim.Allow(ctx, fmt.Sprintf("k%d", i%7), limit); err != nil {
			t.Fatal(err)
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
	t.Logf("command deltas for %d decisions: %v", n, delta)
	if delta["evalsha"] != n {
		t.Fatalf("evalsha calls = %d, want %d", delta["evalsha"], n)
	}
	for cmd, d := range delta {
		switch cmd {
		case "evalsha", "time", "get", "set":
			if d > n {
				t.Fatalf("%s calls = %d, more than one per decision", cmd, d)
			}
		default:
			t.Fatalf("unexpected command %s (%d calls)", cmd, d)
		}
	}
}

// TestScriptReloadAfterFlush shows the NOSCRIPT fallback: after SCRIPT FLUSH
// (as after a restart) the next decision still succeeds.
func TestScriptReloadAfterFlush(t *testing.T) {
	srv := redistest.Start(t)
	lim := newRedisLimiter(t, srv.Addr())
	ctx := context.Background()
	if _, err := lim.Allow(ctx, "k", PerSecond(1)); err != nil {
		t.Fatal(err)
	}
	if err := redistest.NewClient(t, srv.Addr()).ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := lim.Allow(ctx, "k", PerSecond(1))
	if err != nil || res.Allowed {
		t.Fatalf("after SCRIPT FLUSH: %+v, %v; want a denial", res, err)
	}
}

// TestStoredKeys checks the layout on a real Redis: bounded names, the
// library's hash tag first, TTL never constant and never missing.
func TestStoredKeys(t *testing.T) {
	srv := redistest.Start(t)
	lim := newRedisLimiter(t, srv.Addr(), WithPrefix("p:"))
	rdb := redistest.NewClient(t, srv.Addr())
	ctx := context.Background()
	keys := []string{"plain", "{tag}", "}{", "", strings.Repeat("x", 100_000), "\x00\xff"}
	for _, k := range keys {
		_, err := lim.Allow(ctx, k, PerMinute(60))
		if k == "" {
			if err == nil {
				t.Fatal("empty key accepted")
			}
			continue
		}
		if err != nil {
			t.Fatalf("Allow(%.10q) = %v", k, err)
		}
	}
	names, err := rdb.Keys(ctx, "p:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The implicit fleet's heartbeat set is not a bucket (see implicitFleet).
	names = slices.DeleteFunc(names, func(n string) bool { return n == "p:{fleet:default}" })
	if len(names) != len(keys)-1 {
		t.Fatalf("stored %d keys, want %d", len(names), len(keys)-1)
	}
	for _, n := range names {
		if len(n) > 2+6+12+1+redisstore.MaxVerbatimKey {
			t.Fatalf("stored name of %d bytes", len(n))
		}
		ttl, err := rdb.PTTL(ctx, n).Result()
		if err != nil || ttl <= 0 || ttl > time.Second {
			t.Fatalf("PTTL(%.30q) = %v, %v; want (0, 1s] (one token of 60/min)", n, ttl, err)
		}
	}
}

// TestValidation: New and AllowN refuse bad input before any I/O, so the
// client's address need not answer.
func TestValidation(t *testing.T) {
	rdb := outageClient(t, refusedAddr(t))
	var nilClient *redis.Client
	if _, err := New(nilClient); err == nil {
		t.Fatal("New(typed nil) succeeded")
	}
	if _, err := New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	if _, err := New(rdb, WithPrefix("a{b}")); err == nil {
		t.Fatal("brace prefix accepted")
	}
	if _, err := New(rdb, WithPenalty(-time.Second)); err == nil {
		t.Fatal("negative penalty accepted")
	}
	lim, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tests := []struct {
		name   string
		key    string
		n      int
		limits []Limit
		want   string
	}{
		{"no limits", "k", 1, nil, "no limit"},
		{"empty key", "", 1, []Limit{PerSecond(1)}, "empty key"},
		{"zero cost", "k", 0, []Limit{PerSecond(1)}, "cost must be at least 1"},
		{"cost over burst", "k", 11, []Limit{PerSecond(10)}, "exceeds Burst 10"},
		{"cost over the smaller burst", "k", 5, []Limit{PerSecond(10), PerMinute(4)}, "exceeds Burst 4"},
		{"zero burst", "k", 1, []Limit{{Rate: 1, Period: time.Second}}, "Burst must be at least 1"},
		{"zero period", "k", 1, []Limit{{Rate: 1, Burst: 1}}, "Period must be at least 1µs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := lim.AllowN(ctx, tt.key, tt.n, tt.limits...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("AllowN(%q, %d, %v) = %v, want error containing %q", tt.key, tt.n, tt.limits, err, tt.want)
			}
		})
	}
}

// waitFor polls cond every 5ms until it holds, failing the test after
// d.
var waitFor = testkit.WaitFor
