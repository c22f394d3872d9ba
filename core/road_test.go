package core

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// roadRecorder is an Observer (and a ConcurrencyObserver) that keeps what
// the road tells it: every store call's kind, every outage, the
// acquisitions and releases.
type roadRecorder struct {
	mu       sync.Mutex
	ops      map[string]int
	opErrs   map[string]int
	paused   int // store errors reported as excused by a pause of this process
	firstErr map[string]string
	degraded []StoreOutage
	sources  map[Source]int
	acquired map[bool]int
	released int
}

func newRoadRecorder() *roadRecorder {
	return &roadRecorder{ops: map[string]int{}, opErrs: map[string]int{}, firstErr: map[string]string{}, sources: map[Source]int{}, acquired: map[bool]int{}}
}

func (r *roadRecorder) ObserveDecision(_ Result, src Source) {
	r.mu.Lock()
	r.sources[src]++
	r.mu.Unlock()
}

func (r *roadRecorder) ObserveStore(c StoreCall) {
	r.mu.Lock()
	r.ops[c.Op]++
	if c.Err != nil {
		r.opErrs[c.Op]++
		if c.Paused {
			r.paused++
		}
		if _, ok := r.firstErr[c.Op]; !ok {
			r.firstErr[c.Op] = c.Err.Error()
		}
	}
	r.mu.Unlock()
}

func (r *roadRecorder) ObserveDegraded(o StoreOutage) {
	r.mu.Lock()
	r.degraded = append(r.degraded, o)
	r.mu.Unlock()
}

func (r *roadRecorder) ObserveRecovered(StoreOutage) {}

func (r *roadRecorder) ObserveAcquire(_ ConcurrencyLimit, acquired bool, _ Source) {
	r.mu.Lock()
	r.acquired[acquired]++
	r.mu.Unlock()
}

func (r *roadRecorder) ObserveRelease(ConcurrencyLimit) {
	r.mu.Lock()
	r.released++
	r.mu.Unlock()
}

func (r *roadRecorder) outages() []StoreOutage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]StoreOutage(nil), r.degraded...)
}

// TestAcquireBurstKeepsBreakerClosed: three fresh limiter instances, each
// with its own client and the default time budget, make 300 simultaneous
// acquisitions on one key with a cap of 10, while each also decides an
// unrelated key. The acquisitions travel the node's batched road like
// decisions do.
//
// After Ready (what a pod's readiness probe calls, docs/production.md),
// no breaker opens, and where every store call answered within the
// budget nothing degrades and Redis grants exactly the cap. On a machine
// so loaded that some calls outlive the 50 ms budget (measured: p90 of
// 150 ms beside two CPU hogs per core) those calls alone are decided
// under the failure policy; the breaker still stays closed (failures of
// calls under way together count as one).
//
// Without Ready, the first calls dial and shake hands inside their
// budget; under -race beside CPU hogs most of them time out (measured: 1
// breaker of 30 opened in 10 runs). What must hold then too: an
// acquisition whose answer came too late may still hold its slot in Redis
// (it expires within its lease), so Redis's grants heard by callers are
// at most the cap, each is in Redis's set, and the set holds at most the
// cap.
func TestAcquireBurstKeepsBreakerClosed(t *testing.T) {
	for _, ready := range []bool{true, false} {
		t.Run(fmt.Sprintf("ready=%v", ready), func(t *testing.T) { acquireBurst(t, ready) })
	}
}

func acquireBurst(t *testing.T, ready bool) {
	addr := redistest.Addr(t)
	prefix := uniquePrefix()
	const instances, perInstance, deciders, decisions, most = 3, 100, 4, 40, 10
	var acquired, refused, degradedAcq, degradedGrants, degradedAllow atomic.Int64
	rec := newRoadRecorder()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var leases sync.Map
	var rkey string
	for range instances {
		lim, err := New(redistest.NewClient(t, addr), WithPrefix(prefix), WithObserver(rec))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lim.Close() })
		if ready {
			if err := lim.Ready(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: most, Lease: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rkey = redisOf(lim).RKey(c.fp, "hot")
		for range perInstance {
			wg.Go(func() {
				<-start
				ls, err := c.Acquire(context.Background(), "hot")
				if err != nil {
					t.Error(err)
					return
				}
				if ls.Degraded {
					degradedAcq.Add(1)
					if ls.Acquired {
						degradedGrants.Add(1)
					}
				}
				if ls.Acquired {
					acquired.Add(1)
					leases.Store(ls, struct{}{})
				} else {
					refused.Add(1)
				}
			})
		}
		for i := range deciders {
			wg.Go(func() {
				<-start
				for range decisions {
					res, err := lim.Allow(context.Background(), "other:"+strconv.Itoa(i), PerSecond(1000))
					if err != nil {
						t.Error(err)
						return
					}
					if res.Degraded {
						degradedAllow.Add(1)
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	// What Redis holds: the slots granted to callers that heard the answer,
	// and those of acquisitions whose answer came after their budget (the
	// caller was decided by the fallback; the slot expires within its
	// lease).
	held, err := redistest.NewClient(t, addr).ZRange(context.Background(), rkey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var byRedisIDs []string
	leases.Range(func(k, _ any) bool {
		if ls := k.(*Lease); ls.rkey != "" {
			byRedisIDs = append(byRedisIDs, ls.id)
		}
		return true
	})
	leases.Range(func(k, _ any) bool {
		_ = k.(*Lease).Release(context.Background())
		return true
	})
	rec.mu.Lock()
	storeErrs := 0
	for _, n := range rec.opErrs {
		storeErrs += n
	}
	errs := fmt.Sprint(rec.opErrs, rec.firstErr)
	rec.mu.Unlock()
	t.Logf("%d acquired (%d by the fallback), %d refused, %d acquisitions and %d decisions degraded, %d store calls failed %s, outages %v",
		acquired.Load(), degradedGrants.Load(), refused.Load(), degradedAcq.Load(), degradedAllow.Load(), storeErrs, errs, rec.outages())
	if o := rec.outages(); ready && len(o) != 0 {
		t.Errorf("breakers opened on a healthy Redis: %v", o)
	}
	byRedis := acquired.Load() - degradedGrants.Load()
	if byRedis > most {
		t.Errorf("Redis granted %d slots, more than the cap of %d", byRedis, most)
	}
	for _, id := range byRedisIDs {
		if !slices.Contains(held, id) {
			t.Errorf("lease %s granted by Redis is not in its set %v", id, held)
		}
	}
	if g := degradedGrants.Load(); g > instances*most {
		t.Errorf("the fallback granted %d slots, more than the cap of %d on each of %d replicas", g, most, instances)
	}
	if len(held) > most {
		t.Errorf("Redis holds %d slots, more than the cap of %d", len(held), most)
	}
	if ready && storeErrs == 0 && byRedis != most {
		t.Errorf("with every store call answered, Redis granted %d slots, want exactly the cap of %d", byRedis, most)
	}
	if ready && storeErrs == 0 && (acquired.Load() != most || degradedAcq.Load() != 0 || degradedAllow.Load() != 0) {
		t.Errorf("with every store call answered: %d acquired, %d acquisitions and %d decisions degraded; want exactly %d, none and none",
			acquired.Load(), degradedAcq.Load(), degradedAllow.Load(), most)
	}
}

// TestObserverSeesEveryOp: every kind of store call reaches
// Observer.ObserveStore with its kind, and the cap's acquisitions and
// releases reach the ConcurrencyObserver.
func TestObserverSeesEveryOp(t *testing.T) {
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			rec := newRoadRecorder()
			opts := []Option{WithPrefix(uniquePrefix()), WithObserver(rec), WithFleet(Fleet{Name: "obs", Heartbeat: time.Second})}
			if !batched {
				opts = append(opts, WithBatching(0))
			}
			lim := newRedisLimiter(t, redistest.Addr(t), opts...)
			ctx := context.Background()
			rule, err := lim.Prepare(PerSecond(10))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rule.Allow(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if _, err := rule.Peek(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			rv, err := rule.Reserve(ctx, "k", 3)
			if err != nil {
				t.Fatal(err)
			}
			if err := rv.Settle(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if err := rule.Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 1})
			if err != nil {
				t.Fatal(err)
			}
			ls, err := c.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			refusedLease, err := c.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
			_ = refusedLease.Release(ctx) // a refusal releases nothing
			ov, err := NewTestOverrides(lim, "obs")
			if err != nil {
				t.Fatal(err)
			}
			if err := ov.Deny(ctx, "tenant:a"); err != nil { // the change, and reading it back
				t.Fatal(err)
			}
			ov.Close()
			waitFor(t, 10*time.Second, "the fleet's first heartbeat", func() bool { return lim.fleet.live.Load() > 0 })
			if err := lim.Close(); err != nil {
				t.Fatal(err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			want := map[string]int{OpDecide: 2, OpPeek: 1, OpSettle: 1, OpReset: 1, OpAcquire: 2, OpRelease: 1}
			for op, n := range want {
				if rec.ops[op] != n {
					t.Errorf("ObserveStore saw %d calls of kind %q, want %d (all: %v)", rec.ops[op], op, n, rec.ops)
				}
			}
			// The change and its read back, and the poller's first read
			// unless Close came before it.
			if n := rec.ops[OpOverrides]; n < 2 || n > 3 {
				t.Errorf("ObserveStore saw %d overrides calls, want 2 or 3 (all: %v)", n, rec.ops)
			}
			if rec.ops[OpHeartbeat] < 2 { // the first beat, and leaving at Close
				t.Errorf("ObserveStore saw %d heartbeats, want at least 2 (all: %v)", rec.ops[OpHeartbeat], rec.ops)
			}
			if len(rec.opErrs) != 0 {
				t.Errorf("store errors on a healthy Redis: %v", rec.opErrs)
			}
			if rec.acquired[true] != 1 || rec.acquired[false] != 1 || rec.released != 1 {
				t.Errorf("acquisitions %v and %d releases observed, want one taken, one refused, one released", rec.acquired, rec.released)
			}
		})
	}
}

// TestKeyFaultOpensNoBreaker: a key whose own calls fail — a name holding
// another program's value (WRONGTYPE), a calendar quota whose windows the
// server's clock is not in — fails that key's decisions alone: the
// breaker stays closed and other keys are decided by Redis.
func TestKeyFaultOpensNoBreaker(t *testing.T) {
	addr := redistest.Addr(t)
	ctx := context.Background()
	rdb := redistest.NewClient(t, addr)
	cases := []struct {
		name  string
		setup func(t *testing.T, lim *Limiter) (key string, limits []Limit)
	}{
		{"wrongtype", func(t *testing.T, lim *Limiter) (string, []Limit) {
			limits := []Limit{PerSecond(5)}
			p, err := lim.plans.get(limits)
			if err != nil {
				t.Fatal(err)
			}
			if err := rdb.LPush(ctx, redisstore.RedisKey(redisOf(lim).Prefix(), p.FP, "poisoned"), "x").Err(); err != nil {
				t.Fatal(err)
			}
			return "poisoned", limits
		}},
		{"calendar mismatch", func(t *testing.T, lim *Limiter) (string, []Limit) {
			real := lim.now
			lim.now = func() int64 { return real() + (48 * time.Hour).Microseconds() }
			return "skewed", []Limit{PerCalendarDay(100, "UTC")}
		}},
	}
	for _, tc := range cases {
		for _, batched := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/batched=%v", tc.name, batched), func(t *testing.T) {
				rec := newRoadRecorder()
				opts := []Option{WithPrefix(uniquePrefix()), WithObserver(rec), WithLogger(quietLogger())}
				if !batched {
					opts = append(opts, WithBatching(0))
				}
				lim := newRedisLimiter(t, addr, opts...)
				key, limits := tc.setup(t, lim)
				for i := range 10 { // in a row: no answer between them
					res, err := lim.Allow(ctx, key, limits...)
					if err != nil {
						t.Fatalf("decision %d on the faulty key: %v", i, err)
					}
					// A value of another type is replaced after the
					// first decision (see replaceForeign); a calendar
					// mismatch stays the key's own fault.
					if want := tc.name != "wrongtype" || i == 0; res.Degraded != want {
						t.Fatalf("decision %d on the faulty key: degraded %v, want %v: %+v", i, res.Degraded, want, res)
					}
				}
				healthy, err := lim.Allow(ctx, "healthy", PerSecond(1000))
				if err != nil {
					t.Fatal(err)
				}
				if healthy.Degraded {
					t.Error("a healthy key was decided by the fallback after a faulty key's failures")
				}
				if o := rec.outages(); len(o) != 0 {
					t.Errorf("a key's own fault opened a breaker: %v", o)
				}
				if redisOf(lim).WholeOpen() {
					t.Error("the breaker is open")
				}
			})
		}
	}
}

// TestStalledClientOpensNoBreaker: while this process is stopped and
// continued at random (60–150 ms every 300–800 ms, longer than the 50 ms
// budget), decisions on a healthy Redis time out now and then; those
// timeouts overlap the pauses of the client, not an outage of Redis, so
// no breaker opens, and every key stays within its bound.
func TestStalledClientOpensNoBreaker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 4 s")
	}
	addr := redistest.Addr(t)
	rec := newRoadRecorder()
	lim, err := New(outageClient(t, addr), WithPrefix(uniquePrefix()), WithObserver(rec), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	redistest.Stall(t)
	limit := Limit{Rate: 50, Period: time.Second, Burst: 10}
	const keys, workers = 20, 32
	var admitted [keys]atomic.Int64
	var degraded atomic.Int64
	begin := time.Now()
	deadline := begin.Add(4 * time.Second)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; time.Now().Before(deadline); i++ {
				k := i % keys
				res, err := lim.Allow(context.Background(), "k"+strconv.Itoa(k), limit)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted[k].Add(1)
				}
				if res.Degraded {
					degraded.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	bound := int64(limit.Burst) + int64(elapsed.Seconds()*float64(limit.Rate)) + 1
	rec.mu.Lock()
	errs, paused := rec.opErrs[OpDecide], rec.paused
	rec.mu.Unlock()
	t.Logf("%v: %d decisions degraded, %d store errors (%d excused by a pause), outages %v", elapsed, degraded.Load(), errs, paused, rec.outages())
	if errs > 0 && paused == 0 {
		t.Errorf("%d store calls failed while the client was stalled, and the observer was told of no pause", errs)
	}
	if o := rec.outages(); len(o) != 0 {
		t.Errorf("a breaker opened on a healthy Redis while the client was stalled: %v", o)
	}
	for k := range keys {
		if n := admitted[k].Load(); n > bound {
			t.Errorf("key %d: %d admitted, bound %d", k, n, bound)
		}
	}
}
