package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/pause"
	"github.com/sluicehq/sluice/redistest"
)

// recorder is an Observer that counts what it is told.
type recorder struct {
	mu        sync.Mutex
	bySource  map[Source]int
	allowed   int
	storeErrs int // store calls that failed, paused ones included
	paused    int // of those, timeouts excused by a pause of this process
	degraded  []time.Time
	recovered []time.Time
	outages   []time.Duration
	errs      map[string]int // failed store calls by op, reason and latency class
}

func newRecorder() *recorder { return &recorder{bySource: map[Source]int{}, errs: map[string]int{}} }

func (r *recorder) ObserveDecision(res Result, src Source) {
	r.mu.Lock()
	r.bySource[src]++
	if res.Allowed {
		r.allowed++
	}
	r.mu.Unlock()
}

func (r *recorder) ObserveStore(c StoreCall) {
	if c.Err != nil {
		r.mu.Lock()
		r.storeErrs++
		if c.Paused {
			r.paused++
		}
		r.errs[fmt.Sprintf("%s %s paused=%v took %s", c.Op, ErrorReason(c.Err), c.Paused, c.Latency.Round(10*time.Millisecond))]++
		r.mu.Unlock()
	}
}

func (r *recorder) ObserveDegraded(StoreOutage) {
	r.mu.Lock()
	r.degraded = append(r.degraded, time.Now())
	r.mu.Unlock()
}

func (r *recorder) ObserveRecovered(o StoreOutage) {
	r.mu.Lock()
	r.recovered = append(r.recovered, time.Now())
	r.outages = append(r.outages, o.Duration)
	r.mu.Unlock()
}

// outageClient is a go-redis client as production should configure it for
// the limiter: context deadlines honoured (the limiter's budget), no retries
// (a retried decision charges twice), a short dial.
func outageClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialTimeout:           200 * time.Millisecond,
		DialerRetries:         1,
		PoolTimeout:           200 * time.Millisecond,
	})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// refusedAddr returns a loopback address where nothing listens, as after a
// Redis went away: a port the kernel gave out and that is free again.
func refusedAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		tb.Fatal(err)
	}
	return addr
}

// TestKillAndRestart SIGKILLs a real redis-server under load from 64
// goroutines, keeps going for 2 s, restarts it on the same port and keeps
// going: no caller sees an error, the local fallback holds the limit during
// the outage, and decisions are back on Redis soon after the restart.
//
// How soon is bounded by go-redis: after PoolSize failed dials its pool
// stops dialing and re-dials once a second from a goroutine of its own, so
// the client itself is back up to 1 s after Redis; the limiter's probe (every
// 100 ms) adds at most that much.
//
// It runs with decisions through the client's pool and on the limiter's own
// connections (WithOwnConnections), which find the killed connections dead
// and dial the restarted server themselves.
func TestKillAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("outage test")
	}
	for _, own := range []bool{false, true} {
		t.Run(map[bool]string{false: "pool", true: "own connections"}[own], func(t *testing.T) { testKillAndRestart(t, own) })
	}
}

func testKillAndRestart(t *testing.T, own bool) {
	srv := redistest.Start(t)
	rec := newRecorder()
	var logs syncBuffer
	lim, err := New(outageClient(t, srv.Addr()),
		WithTimeout(100*time.Millisecond),
		WithOwnConnections(own),
		WithObserver(rec),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	limit := Limit{Rate: 500, Period: time.Second, Burst: 50}
	ctx := context.Background()

	var (
		phase                      atomic.Int32 // 0 healthy, 1 down, 2 restarted
		errs, admittedDown, offers atomic.Int64
		firstBack                  atomic.Int64 // unix µs of the first store decision after restart
		stop                       = make(chan struct{})
		wg                         sync.WaitGroup
	)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				ph := phase.Load()
				res, err := lim.Allow(ctx, "shared", limit)
				offers.Add(1)
				if err != nil {
					errs.Add(1)
					continue
				}
				switch {
				case ph == 1 && res.Allowed && res.Degraded:
					admittedDown.Add(1)
				case ph == 2 && !res.Degraded:
					firstBack.CompareAndSwap(0, time.Now().UnixMicro())
				}
			}
		}()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	<-tick.C
	srv.Kill()
	downAt := time.Now()
	phase.Store(1)
	<-tick.C
	<-tick.C
	phase.Store(2)
	srv.Restart()
	restartedAt := time.Now()
	down := restartedAt.Sub(downAt)
	<-tick.C
	<-tick.C
	close(stop)
	wg.Wait()

	t.Logf("%d decisions; %d admitted by the fallback in %v of outage (ideal at most %.0f); back on Redis %v after the restart",
		offers.Load(), admittedDown.Load(), down, float64(limit.Burst)+float64(limit.Rate)*down.Seconds(),
		time.Duration(firstBack.Load()-restartedAt.UnixMicro())*time.Microsecond)
	if errs.Load() != 0 {
		t.Fatalf("%d errors reached callers", errs.Load())
	}
	// The fallback (one replica: the whole limit) holds the limit: at most
	// a burst plus the rate over the outage.
	if max := float64(limit.Burst) + float64(limit.Rate)*down.Seconds() + 1; float64(admittedDown.Load()) > max {
		t.Fatalf("fallback admitted %d during %v, more than %.0f", admittedDown.Load(), down, max)
	}
	if firstBack.Load() == 0 {
		t.Fatal("no decision came from Redis after the restart")
	}
	if back := time.Duration(firstBack.Load()-restartedAt.UnixMicro()) * time.Microsecond; back > 1500*time.Millisecond {
		t.Fatalf("back on Redis %v after the restart, want within go-redis's 1s re-dial plus the 100ms probe (1.5s with margin)", back)
	}
	if n := strings.Count(logs.String(), "store unavailable"); n != 1 {
		t.Fatalf("logged the outage %d times, want once:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "store recovered"); n != 1 {
		t.Fatalf("logged the recovery %d times, want once:\n%s", n, logs.String())
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.degraded) != 1 || len(rec.recovered) != 1 {
		t.Fatalf("observer saw %d outages and %d recoveries, want 1 and 1", len(rec.degraded), len(rec.recovered))
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer = testkit.SyncBuffer

// TestSlowRedis puts a fault proxy that delays every reply by 300 ms between
// the limiter and Redis: every decision returns within the 50 ms budget plus
// a margin, the breaker opens, and no goroutines pile up.
//
// It runs with decisions through the client's pool and on the limiter's own
// connections (WithOwnConnections), whose deadline is the same budget.
func TestSlowRedis(t *testing.T) {
	for _, own := range []bool{false, true} {
		t.Run(map[bool]string{false: "pool", true: "own connections"}[own], func(t *testing.T) { testSlowRedis(t, own) })
	}
}

func testSlowRedis(t *testing.T, own bool) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	rec := newRecorder()
	rdb := outageClient(t, proxy.Addr())
	lim, err := New(rdb, WithTimeout(50*time.Millisecond), WithOwnConnections(own), WithObserver(rec), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Connections and scripts ready first: on a busy machine a cold
	// dial, handshake and EVAL may not fit the first call's budget, and
	// this test is about a slow Redis, not a cold start.
	if err := lim.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := lim.Allow(ctx, "k", PerSecond(100)); err != nil || res.Degraded {
		t.Fatalf("healthy Allow = %+v, %v", res, err)
	}
	before := runtime.NumGoroutine()
	proxy.SetDelay(300 * time.Millisecond)
	// slowest is the longest decision that no pause of this process
	// overlapped (a pause lengthens whatever it stops); slowestAll, any.
	var slowest, slowestAll atomic.Int64
	longest := func(m *atomic.Int64, el int64) {
		for {
			cur := m.Load()
			if el <= cur || m.CompareAndSwap(cur, el) {
				return
			}
		}
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				start := pause.Now()
				res, err := lim.Allow(ctx, "k", PerSecond(100))
				end := pause.Now()
				if err != nil || !res.Degraded {
					t.Errorf("slow Allow = %+v, %v; want a degraded decision", res, err)
					return
				}
				longest(&slowestAll, end-start)
				if !pause.Overlaps(start, end) {
					longest(&slowest, end-start)
				}
			}
		}()
	}
	wg.Wait()
	during := runtime.NumGoroutine()
	rec.mu.Lock()
	opened, paid, paused := len(rec.degraded), rec.storeErrs, rec.paused
	rec.mu.Unlock()
	t.Logf("slowest decision %v (%v counting those a pause of this process overlapped); %d of 640 decisions paid the budget, %d of them excused by a pause; goroutines %d before, %d after",
		time.Duration(slowest.Load()), time.Duration(slowestAll.Load()), paid, paused, before, during)
	// A decision may wait for its key's batch in flight before its own
	// is sent: two budgets, and a margin. (A call sent again after a pause
	// shares its budget: see TestOneBudgetPerCall.)
	if took := time.Duration(slowest.Load()); took > 2*50*time.Millisecond+100*time.Millisecond {
		t.Fatalf("a decision took %v, budget 50ms", took)
	}
	if took := time.Duration(slowestAll.Load()); took > time.Second {
		t.Fatalf("a decision took %v, budget 50ms, even allowing for pauses of this process", took)
	}
	if opened != 1 {
		t.Fatalf("breaker opened %d times, want 1", opened)
	}
	// The breaker opens at its third failure in a row, and a call sent
	// before the last counted failure ended does not count again: three
	// rounds of the 32 callers (96) pay for a slow Redis, and a probe or
	// two while it is open. Timeouts excused by a pause of this process
	// (a busy machine) count toward no breaker; they are bounded by
	// excuseFor, not here.
	if charged := paid - paused; charged > 100 {
		t.Fatalf("%d decisions were charged for the slow Redis (and %d excused); the breaker should spare the rest", charged, paused)
	}
	// The proxy runs two goroutines per connection, and go-redis replaces
	// each connection that timed out; the limiter itself starts none.
	if during > before+2*32+8 {
		t.Fatalf("goroutines grew from %d to %d", before, during)
	}
}

// fakeScripter answers every script call with a fixed reply or error.
type fakeScripter struct {
	val any
	err error
}

func (f fakeScripter) cmd(ctx context.Context) *redis.Cmd {
	return redis.NewCmdResult(f.val, f.err)
}
func (f fakeScripter) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.cmd(ctx)
}
func (f fakeScripter) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.cmd(ctx)
}
func (f fakeScripter) EvalRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.cmd(ctx)
}
func (f fakeScripter) EvalShaRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.cmd(ctx)
}
func (f fakeScripter) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceResult(nil, f.err)
}
func (f fakeScripter) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	return redis.NewStringResult("", f.err)
}

// loading is the reply of a Redis that is loading its data: up, but unable
// to serve.
const loading = "LOADING Redis is loading the dataset in memory"

// TestErrorClasses sends every kind of store failure through each failure
// policy: never an error under FallbackLocal or FailOpen, always
// ErrUnavailable under FailClosed, never reported as a denial.
func TestErrorClasses(t *testing.T) {
	replies := []string{
		loading,
		"READONLY You can't write against a read only replica.",
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
		"CLUSTERDOWN The cluster is down",
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"OOM command not allowed when used memory > 'maxmemory'.",
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.",
		"NOSCRIPT No matching script. Please use EVAL.",
		"ERR unexpected",
	}
	type setup func(t *testing.T) redis.Scripter
	cases := map[string]setup{}
	for _, msg := range replies {
		cases[strings.Fields(msg)[0]] = func(t *testing.T) redis.Scripter {
			return outageClient(t, redistest.Failing(t, msg))
		}
	}
	cases["refused"] = func(t *testing.T) redis.Scripter {
		return outageClient(t, refusedAddr(t))
	}
	cases["timeout"] = func(t *testing.T) redis.Scripter {
		p := redistest.NewProxy(t, redistest.Failing(t, "ERR never reached"))
		p.SetBlackhole(true)
		return outageClient(t, p.Addr())
	}
	cases["pool exhausted"] = func(t *testing.T) redis.Scripter {
		addr := redistest.Failing(t, "ERR the connection is taken, whatever the answer")
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, PoolTimeout: time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		conn := rdb.Conn() // holds the only connection
		// An error reply: the connection is established, and now held.
		var reply redis.Error
		if err := conn.Ping(context.Background()).Err(); !errors.As(err, &reply) {
			t.Fatalf("Ping on the held connection = %v, want the server's error reply", err)
		}
		t.Cleanup(func() { conn.Close() })
		return rdb
	}
	cases["unexpected reply"] = func(t *testing.T) redis.Scripter {
		return fakeScripter{val: []any{int64(1), "two"}}
	}
	cases["reply out of range"] = func(t *testing.T) redis.Scripter {
		return fakeScripter{val: []any{int64(1 + 4*7), int64(0), int64(0), int64(0), int64(0)}} // limit index 7 of 1
	}
	for name, mk := range cases {
		for _, pol := range []FailurePolicy{FallbackLocal, FailOpen, FailClosed} {
			t.Run(name+"/"+pol.String(), func(t *testing.T) {
				lim, err := New(mk(t), WithFailurePolicy(pol), WithTimeout(100*time.Millisecond), WithLogger(slog.New(slog.DiscardHandler)), WithFallbackReplicas(1))
				if err != nil {
					t.Fatal(err)
				}
				for i := range 5 {
					res, err := lim.Allow(context.Background(), "k", PerMinute(3))
					switch pol {
					case FailClosed:
						if !errors.Is(err, ErrUnavailable) {
							t.Fatalf("request %d: Allow = %+v, %v; want ErrUnavailable", i, res, err)
						}
					case FailOpen:
						if err != nil || !res.Allowed || !res.Degraded {
							t.Fatalf("request %d: Allow = %+v, %v; want a degraded admission", i, res, err)
						}
					default:
						want := i < 3 // the fallback's own bucket of 3
						if err != nil || res.Allowed != want || !res.Degraded {
							t.Fatalf("request %d: Allow = %+v, %v; want allowed=%v, degraded", i, res, err, want)
						}
					}
				}
			})
		}
	}
}

// TestCallerCancelDoesNotTrip shows that callers who give up on a slow Redis
// are not counted as store failures.
func TestCallerCancelDoesNotTrip(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	proxy.SetDelay(200 * time.Millisecond)
	rec := newRecorder()
	lim, err := New(outageClient(t, proxy.Addr()), WithTimeout(time.Second), WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_, err := lim.Allow(ctx, "k", PerSecond(1))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Allow with a 10ms caller deadline = %v, want the caller's error", err)
		}
	}
	if !redisOf(lim).WholeClosed() {
		t.Fatal("the breaker is not closed after caller cancellations")
	}
	if len(rec.degraded) != 0 || rec.storeErrs != 0 {
		t.Fatalf("observer saw %d outages and %d store errors, want none", len(rec.degraded), rec.storeErrs)
	}
}

// TestFlood offers one key 100 times its limit for 3 s: thanks to the deny
// cache, Redis executes about one call per admission, not one per request.
func TestFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("3 s load test")
	}
	srv := redistest.Start(t)
	lim := newRedisLimiter(t, srv.Addr())
	admin := redistest.NewClient(t, srv.Addr())
	ctx := context.Background()
	limit := Limit{Rate: 100, Period: time.Second, Burst: 10}
	if _, err := lim.Allow(ctx, "warm", limit); err != nil {
		t.Fatal(err)
	}
	before, err := redistest.CommandCalls(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	var offered, admitted, errs atomic.Int64
	var end atomic.Int64 // when the last decision came back, unix nanoseconds
	start := time.Now()
	stop := start.Add(3 * time.Second)
	var wg sync.WaitGroup
	// While this process is paused nobody asks: the bucket fills to its
	// burst, and what refills beyond that is lost to the limiter and the
	// ideal alike. A watcher's gaps longer than the bucket takes to fill
	// measure it (none on a quiet machine).
	fill := time.Duration(limit.Burst) * limit.Period / time.Duration(limit.Rate)
	var overflow atomic.Int64 // nanoseconds of refill beyond a full bucket
	wg.Go(func() {
		for last := time.Now(); last.Before(stop); {
			time.Sleep(time.Millisecond)
			now := time.Now()
			if gap := now.Sub(last) - fill; gap > 0 {
				overflow.Add(int64(gap))
			}
			last = now
		}
	})
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Millisecond) // 10 goroutines: 10,000/s, 100x the limit
			defer tick.Stop()
			for ; time.Now().Before(stop); <-tick.C {
				res, err := lim.Allow(ctx, "flood", limit)
				if now := time.Now().UnixNano(); now > end.Load() {
					end.Store(now) // (a race between two stores moves end by a tick at most)
				}
				offered.Add(1)
				if err != nil || res.Degraded {
					errs.Add(1)
				} else if res.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	after, err := redistest.CommandCalls(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	calls := after["evalsha"] - before["evalsha"]
	// The ideal counts the refill until the last decision came back, not
	// until now: on a busy machine the goroutines' exit and the INFO call
	// above take a tenth of a second, which would count ten tokens nobody
	// could take; and a pause of this process just before stop ends the
	// decisions early, leaving what refills after them to nobody.
	ideal := float64(limit.Burst) + float64(limit.Rate)*time.Unix(0, end.Load()).Sub(start).Seconds()
	lost := float64(limit.Rate) * time.Duration(overflow.Load()).Seconds() / limit.Period.Seconds()
	t.Logf("offered %d, admitted %d (ideal %.1f, %.1f of it lost to pauses of this process), Redis script calls %d (%.2f per admission, %.1f%% of offered)",
		offered.Load(), admitted.Load(), ideal, lost, calls, float64(calls)/float64(admitted.Load()), 100*float64(calls)/float64(offered.Load()))
	if errs.Load() != 0 {
		t.Fatalf("%d errors or degraded decisions", errs.Load())
	}
	if calls > 3*admitted.Load()+64 {
		t.Fatalf("%d Redis calls for %d admissions", calls, admitted.Load())
	}
	// The cache must not cost admissions either.
	// On a quiet machine within 1% of the ideal; with pauses, within 2% of
	// what they left (a probe due during a pause is sent late, and the
	// watcher sees the pauses, not the starved moments between them).
	lower := 0.99 * ideal
	if lost > 0 {
		lower = 0.98 * (ideal - lost)
	}
	if a := float64(admitted.Load()); a > ideal+1 || a < lower {
		t.Fatalf("admitted %v, want within [%.1f, +1] of the ideal %.1f (%.1f lost to pauses)", a, lower, ideal, lost)
	}
}

// TestDenyCacheNeverOverDenies runs random traffic through a limiter with a
// deny cache on a virtual clock (a real Redis decides on it too) and checks
// every local denial against the reference model: Redis would have denied
// it too.
func TestDenyCacheNeverOverDenies(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	lim := newClockLimiter(t, redistest.Addr(t), &now, WithObserver(newRecorder()))
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 7))
	models := map[string]*bucket{}
	cached := 0
	for i := range 20_000 {
		if dt := time.Duration(r.Int64N(40_000)) * time.Microsecond; r.IntN(3) > 0 {
			now = now.Add(dt)
		}
		ls := diffPlans[r.IntN(len(diffPlans))]
		p, err := lim.plans.get(ls)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("k%d", r.IntN(3))
		n := 1
		if r.IntN(5) == 0 {
			n = int(min(2, p.minB))
		}
		if hit := peekDenial(lim.denies, p.ID, key, lim.now()); hit && n == 1 {
			cached++
			b := models[p.FP+key]
			if b == nil {
				t.Fatalf("step %d: deny cache holds %s without a Redis decision", i, key)
			}
			copyB := bucket{lock: b.lock, tats: append([]tat(nil), b.tats...), set: b.set}
			if d, _ := stepBucket(&copyB, now.UnixMicro(), p.Ticks, 1, 0, 0); d.Allowed {
				t.Fatalf("step %d: the deny cache denies %s under %v, but Redis would admit it", i, key, ls)
			}
		}
		res, err := lim.AllowN(ctx, key, n, ls...)
		if err != nil {
			t.Fatal(err)
		}
		b := models[p.FP+key]
		if b == nil {
			b = &bucket{}
			models[p.FP+key] = b
		}
		want, _ := stepBucket(b, now.UnixMicro(), p.Ticks, int64(n), 0, 0)
		if res.Allowed != want.Allowed {
			t.Fatalf("step %d: limiter allowed=%v, model %v", i, res.Allowed, want.Allowed)
		}
	}
	t.Logf("%d of 20000 decisions came from the deny cache, each checked against the model", cached)
	if cached == 0 {
		t.Fatal("the deny cache was never used")
	}
}

// TestMemoryLimiter runs the in-memory mode through the same API.
func TestMemoryLimiter(t *testing.T) {
	lim, err := NewMemory(WithPenalty(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1_000_000_000_000)
	lim.now = func() int64 { return now }
	ctx := context.Background()
	for i, want := range []bool{true, true, false, false} {
		res, err := lim.Allow(ctx, "k", PerSecond(2))
		if err != nil || res.Allowed != want || res.Degraded {
			t.Fatalf("request %d: %+v, %v; want allowed=%v", i, res, err, want)
		}
	}
	now += 30_000_000 // inside the one-minute lock
	if res, _ := lim.Allow(ctx, "k", PerSecond(2)); res.Allowed || !res.Locked {
		t.Fatalf("during the lock: %+v", res)
	}
	now += 31_000_000
	if res, _ := lim.Allow(ctx, "k", PerSecond(2)); !res.Allowed {
		t.Fatalf("after the lock: %+v", res)
	}
}

// TestFallbackShare shows WithFallbackReplicas: with 3 replicas each
// replica's fallback admits a third of the burst and of the rate.
func TestFallbackShare(t *testing.T) {
	lim, err := New(outageClient(t, redistest.Failing(t, loading)), WithFallbackReplicas(3), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1_000_000_000_000)
	lim.now = func() int64 { return now }
	admitted := 0
	for range 100 {
		if res, err := lim.Allow(context.Background(), "k", PerMinute(600)); err != nil {
			t.Fatal(err)
		} else if res.Allowed {
			admitted++
		}
	}
	if admitted != 100 {
		t.Fatalf("admitted %d of 100 at once, want 100 (fallback burst 200)", admitted)
	}
	for range 150 {
		lim.Allow(context.Background(), "k", PerMinute(600))
	}
	now += 60_000_000 // one minute refills 600/3 = 200 tokens
	admitted = 0
	for range 300 {
		if res, _ := lim.Allow(context.Background(), "k", PerMinute(600)); res.Allowed {
			admitted++
		}
	}
	if admitted != 200 {
		t.Fatalf("after a minute the fallback admitted %d, want 200 (a third of 600)", admitted)
	}
}

// peekDenial reports whether the deny cache would deny key at now, without
// starting a probe.
func peekDenial(c *denyCache, id uint64, key string, now int64) bool {
	k := makeLocalKey(id, key)
	sh := c.m.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	d := sh.m[k]
	return d != nil && now < d.until
}

// TestFallbackCostAboveShare: during an outage, a request costing more than
// the replica's share of the burst takes the whole share instead of being
// denied for as long as the outage lasts; results name the local limit.
func TestFallbackCostAboveShare(t *testing.T) {
	lim, err := New(outageClient(t, redistest.Failing(t, loading)), WithFallbackReplicas(3), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1_000_000_000_000)
	lim.now = func() int64 { return now }
	ctx := context.Background()
	global := PerMinute(10) // the fallback enforces 10 per 3 min, burst 4
	res, err := lim.AllowN(ctx, "k", 5, global)
	if err != nil || !res.Allowed || !res.Degraded {
		t.Fatalf("cost 5 with a local burst of 4: %+v, %v; want admitted", res, err)
	}
	if want := (Limit{Rate: 10, Period: 3 * time.Minute, Burst: 4}); res.Limit != want {
		t.Fatalf("Result.Limit = %v, want the local %v", res.Limit, want)
	}
	if res, _ := lim.AllowN(ctx, "k", 1, global); res.Allowed {
		t.Fatalf("the share is spent, yet %+v", res)
	}
}
