package core

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/sluicehq/sluice/redistest"
)

// storeHealth counts what a limiter tells its observer about the store.
type storeHealth struct {
	storeErrs  atomic.Int64
	degraded   atomic.Int64 // outages begun
	lastErr    atomic.Value
	fastFailed atomic.Int64 // the longest failed call shorter than minFail, if any
	minFail    time.Duration
}

func (h *storeHealth) ObserveDecision(Result, Source) {}
func (h *storeHealth) ObserveStore(c StoreCall) {
	if err := c.Err; err != nil {
		h.storeErrs.Add(1)
		h.lastErr.Store(err.Error())
		if c.Latency < h.minFail {
			h.fastFailed.Store(int64(max(c.Latency, 1)))
		}
	}
}
func (h *storeHealth) ObserveDegraded(StoreOutage)  { h.degraded.Add(1) }
func (h *storeHealth) ObserveRecovered(StoreOutage) {}

func (h *storeHealth) String() string {
	last, _ := h.lastErr.Load().(string)
	return fmt.Sprintf("%d store errors (last: %q), %d outages", h.storeErrs.Load(), last, h.degraded.Load())
}

// loop calls f(0), f(1), ... in a goroutine of wg until stop closes.
func loop(wg *sync.WaitGroup, stop <-chan struct{}, f func(i int)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			f(i)
		}
	}()
}

// impatient runs a caller that decides on its own keys with a deadline of
// d per call, until stop closes, and counts its calls.
func impatient(wg *sync.WaitGroup, stop <-chan struct{}, lim *Limiter, name string, d time.Duration, calls *atomic.Int64) {
	loop(wg, stop, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		lim.Allow(ctx, fmt.Sprintf("%s-%d", name, i%16), PerSecond(1000))
		cancel()
		calls.Add(1)
	})
}

// TestImpatientCallersFailNoOne mixes callers with a 3 ms deadline into
// batches of patient callers, with Redis 10 ms away, under FailClosed (so a
// store failure would surface as an error) and a 500 ms budget. The
// impatient callers leave with their own deadline; nobody else gets an
// error and the store is never judged failing. Before a batch ran under its
// own budget, the patient callers got thousands of errors here.
func TestImpatientCallersFailNoOne(t *testing.T) {
	if testing.Short() {
		t.Skip("1 s load test")
	}
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	h := &storeHealth{}
	lim := newRedisLimiter(t, proxy.Addr(), WithFailurePolicy(FailClosed), WithTimeout(500*time.Millisecond), WithObserver(h))
	lim.Allow(context.Background(), "warm", PerSecond(1))
	proxy.SetDelay(10 * time.Millisecond)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var impCalls, answered, errs atomic.Int64
	for i := range 4 {
		impatient(&wg, stop, lim, fmt.Sprintf("imp%d", i), 3*time.Millisecond, &impCalls)
	}
	for i := range 16 {
		loop(&wg, stop, func(j int) {
			_, err := lim.Allow(context.Background(), fmt.Sprintf("p%d-%d", i, j%8), PerSecond(1000))
			if err != nil {
				if errs.Add(1) <= 3 {
					t.Errorf("patient caller %d: %v", i, err)
				}
				return
			}
			answered.Add(1)
		})
	}
	time.Sleep(time.Second) // wall time under load is what this test is about
	close(stop)
	wg.Wait()
	t.Logf("%d patient decisions, %d errors; %d impatient calls; %s", answered.Load(), errs.Load(), impCalls.Load(), h)
	if errs.Load() > 0 || h.storeErrs.Load() > 0 || h.degraded.Load() > 0 {
		t.Fatalf("the impatient callers cost others their answers: %d errors; %s", errs.Load(), h)
	}
	if answered.Load() < 100 {
		t.Fatalf("only %d patient decisions in 1s", answered.Load())
	}
}

// TestImpatientCallersKeepTheLimit: three limiter instances share a key
// limited to 50/s burst 10, with Redis a few milliseconds away, while two
// callers per instance decide on other keys with a 2 ms deadline. The key
// admits at most burst + rate·t + 1, and nothing is degraded. Before, the
// impatient callers opened the breakers and the local fallbacks admitted
// about three times the limit.
func TestImpatientCallersKeepTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("2 s load test")
	}
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	prefix := WithPrefix(fmt.Sprintf("sluicetest:imp:%d:", time.Now().UnixNano()))
	limit := Limit{Rate: 50, Period: time.Second, Burst: 10}
	var lims [3]*Limiter
	var healths [3]storeHealth
	for i := range lims {
		// A budget with room for a loaded two-core machine under the race
		// detector: what is tested is that impatient callers fail no one,
		// not how fast this machine schedules.
		lims[i] = newRedisLimiter(t, proxy.Addr(), prefix, WithTimeout(500*time.Millisecond), WithObserver(&healths[i]))
		lims[i].Allow(context.Background(), "warm", PerSecond(1))
	}
	proxy.SetDelay(3 * time.Millisecond)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var impCalls, admitted, decisions, degraded atomic.Int64
	var first, last atomic.Int64 // unix microseconds: first call sent, last admitted call returned
	for i, lim := range lims {
		for j := range 2 {
			impatient(&wg, stop, lim, fmt.Sprintf("imp%d.%d", i, j), 2*time.Millisecond, &impCalls)
		}
		for range 2 {
			loop(&wg, stop, func(int) {
				// Paced, as clients are: a caller spinning on the
				// deny cache would starve the scheduler, not Redis.
				time.Sleep(250 * time.Microsecond)
				sent := time.Now().UnixMicro()
				first.CompareAndSwap(0, sent)
				res, err := lim.Allow(context.Background(), "shared", limit)
				if err != nil {
					t.Errorf("Allow: %v", err)
					return
				}
				decisions.Add(1)
				if res.Degraded {
					degraded.Add(1)
				}
				if res.Allowed {
					admitted.Add(1)
					returned := time.Now().UnixMicro()
					for {
						l := last.Load()
						if returned <= l || last.CompareAndSwap(l, returned) {
							break
						}
					}
				}
			})
		}
	}
	time.Sleep(2 * time.Second) // wall time under load is what this test is about
	close(stop)
	wg.Wait()
	// Every admitted request was decided by Redis after it was sent and
	// before it returned, so the decisions span at most from the first
	// send to the last admitted request's return. (The bound once ended at
	// that request's send, with one token of slack: on a loaded machine a
	// request spends longer than a token's 20 ms between its send and
	// Redis, and 114 admissions against a bound of 111 were that, not an
	// over-admission.)
	span := time.Duration(last.Load()-first.Load()) * time.Microsecond
	bound := int64(limit.Burst) + int64(span.Seconds()*float64(limit.Rate)) + 1
	t.Logf("shared key: %d admitted of %d decisions over %v (bound %d), %d degraded; %d impatient calls; instances: %s / %s / %s",
		admitted.Load(), decisions.Load(), span, bound, degraded.Load(), impCalls.Load(), &healths[0], &healths[1], &healths[2])
	if degraded.Load() > 0 {
		t.Errorf("%d decisions on the shared key were degraded", degraded.Load())
	}
	if admitted.Load() > bound {
		t.Fatalf("the shared key admitted %d, more than burst + rate·t + 1 = %d", admitted.Load(), bound)
	}
	for i := range healths {
		if healths[i].degraded.Load() > 0 {
			t.Errorf("instance %d judged the store failing: %s", i, &healths[i])
		}
	}
}

// TestLatencyBelowBudget: Redis answering in 60% of the budget fails no
// decision for want of time, batched or not, with 16 callers. Before, a
// batch formed from queued callers started with part of their budget
// already spent, and 99% of decisions degraded at 60% of the budget: a
// caller queued behind a busy batch for 60% and then waited 60% for its
// own.
//
// What is checked is that property, not the machine's speed: every store
// call that failed must have run for the whole budget from its own send (a
// call cut short by time spent queued would fail sooner), and most
// decisions must be made by Redis. On a machine loaded past the budget's
// 40% of slack (1 s here: the CI runs other packages' builds and tests
// beside this one) a call can really outrun the budget; that is logged,
// not failed.
func TestLatencyBelowBudget(t *testing.T) {
	t.Parallel() // waits on Redis and timers more than it computes
	if testing.Short() {
		t.Skip("load test")
	}
	srv := redistest.Start(t)
	for _, tc := range []struct {
		budget   time.Duration
		inflight int
	}{{2500 * time.Millisecond, 4}, {2500 * time.Millisecond, 0}} {
		budget, inflight := tc.budget, tc.inflight
		delay := budget * 6 / 10
		t.Run(fmt.Sprintf("budget=%v,inflight=%d", budget, inflight), func(t *testing.T) {
			proxy := redistest.NewProxy(t, srv.Addr())
			h := &storeHealth{minFail: budget - time.Millisecond}
			// Every caller's connection is open before the link slows
			// down, and none sends a handshake on first use (HELLO,
			// CLIENT SETINFO): that would cross the slow link too, and
			// it is not the decision's latency.
			rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
				PoolSize: 32, MinIdleConns: 16, ConnMaxIdleTime: time.Hour, DialTimeout: 2 * time.Second, Protocol: 2, DisableIdentity: true,
				MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
			t.Cleanup(func() { rdb.Close() })
			lim, err := New(rdb, WithPrefix(fmt.Sprintf("lat%d:%d:", inflight, time.Now().UnixNano())),
				WithTimeout(budget), WithBatching(inflight), WithObserver(h))
			if err != nil {
				t.Fatal(err)
			}
			// Set up 16 connections at once (go-redis does on a
			// connection's first use), before the link slows.
			var conns []*redis.Conn
			for range 16 {
				c := rdb.Conn()
				if err := c.Ping(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
			}
			for _, c := range conns {
				c.Close() // back to the pool, set up
			}
			lim.Allow(context.Background(), "warm", PerSecond(1)) // loads the script
			proxy.SetDelay(delay)
			var wg sync.WaitGroup
			var decisions, degraded atomic.Int64
			for i := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range 3 {
						res, err := lim.Allow(context.Background(), fmt.Sprintf("k%d-%d", i, j), PerSecond(100))
						if err != nil {
							t.Errorf("Allow: %v", err)
							return
						}
						decisions.Add(1)
						if res.Degraded {
							degraded.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			t.Logf("%d decisions with Redis %v away and a %v budget: %d degraded; %s", decisions.Load(), delay, budget, degraded.Load(), h)
			if fast := time.Duration(h.fastFailed.Load()); fast > 0 {
				t.Errorf("a store call failed after %v, before its %v budget: time spent queued was charged to it; %s", fast, budget, h)
			}
			if 2*degraded.Load() > decisions.Load() {
				t.Errorf("%d of %d decisions degraded, more than half; %s", degraded.Load(), decisions.Load(), h)
			}
		})
	}
}

// TestEvictedProbeWakesWaiters: a deny-cache entry evicted while its probe
// is out (every entry sampled had one) wakes the requests waiting on the
// probe, which then ask Redis themselves; before, they waited until their
// own deadline, forever without one.
func TestEvictedProbeWakesWaiters(t *testing.T) {
	c := newDenyCache(numShards) // one entry per shard
	const id = 7
	c.put(id, "a", 0, denial{until: 10})
	if _, st, _ := c.check(id, "a", 20); st != denyProbe {
		t.Fatalf("check after until = %v, want a probe", st)
	}
	_, st, ch := c.check(id, "a", 21)
	if st != denyWait {
		t.Fatalf("second check = %v, want to wait on the probe", st)
	}
	// Another key in the same shard evicts "a" with its probe out.
	shard := c.m.shard(makeLocalKey(id, "a"))
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprint("b", i); c.m.shard(makeLocalKey(id, k)) == shard {
			other = k
		}
	}
	c.put(id, other, 22, denial{until: 100})
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter on the evicted probe was never woken")
	}
	if _, st, _ := c.check(id, "a", 23); st != denyMiss {
		t.Errorf("after eviction, check = %v, want a miss (ask Redis)", st)
	}
	// The prober's own release finds nothing to close and must not panic.
	c.release(id, "a", ch)
}

// TestDenyEntryGoesWhenItsProbeFindsTokens: once a denied key's entry
// expires, the request that probes Redis and is admitted with tokens to
// spare (nothing new to cache) removes the entry, so later requests on
// the key are plain misses: no probe each (an allocation, and under
// concurrency a wait of one round trip). Before, the expired entry
// lingered and made every later request a probe of its own.
func TestDenyEntryGoesWhenItsProbeFindsTokens(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	lim := newClockLimiter(t, redistest.Addr(t), &now)
	ctx := context.Background()
	limit := Limit{Rate: 10, Period: time.Second, Burst: 10}
	rule, err := lim.Prepare(limit)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if res, err := rule.Allow(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("draining the burst: %+v, %v", res, err)
		}
	}
	if res, err := rule.Allow(ctx, "k"); err != nil || res.Allowed {
		t.Fatalf("past the burst: %+v, %v; want denied", res, err)
	}
	if _, st, _ := lim.denies.check(rule.p.ID, "k", now.UnixMicro()); st != denyHit {
		t.Fatalf("after the denial the deny cache says %v, want a hit", st)
	}
	now = now.Add(time.Second) // the bucket is full again
	if res, err := rule.Allow(ctx, "k"); err != nil || !res.Allowed || res.Remaining != 9 {
		t.Fatalf("a second later: %+v, %v; want admitted with 9 left", res, err)
	}
	for i := range 3 {
		if _, st, _ := lim.denies.check(rule.p.ID, "k", now.UnixMicro()); st != denyMiss {
			t.Fatalf("check %d after the admitted probe = %v, want a miss: the expired entry lingers", i, st)
		}
	}
	if n := lim.denies.m.len(); n != 0 {
		t.Errorf("the deny cache holds %d entries, want none", n)
	}
}
