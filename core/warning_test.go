package core_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// thresholdLog collects threshold events and store calls of several
// limiters: a core.ThresholdObserver and a WithThresholdHandler.
type thresholdLog struct {
	mu       sync.Mutex
	events   map[string]int // by key: handler calls
	observed map[string]int // by limit name: ObserveThreshold calls
	calls    map[string]int // store calls by op
	last     core.ThresholdEvent
	leased   atomic.Int64 // marked admissions from a token lease
}

func newThresholdLog() *thresholdLog {
	return &thresholdLog{events: map[string]int{}, observed: map[string]int{}, calls: map[string]int{}}
}

func (g *thresholdLog) handle(ev core.ThresholdEvent) {
	g.mu.Lock()
	g.events[ev.Key]++
	g.last = ev
	g.mu.Unlock()
}

func (g *thresholdLog) ObserveThreshold(l core.Limit) {
	g.mu.Lock()
	g.observed[l.Name]++
	g.mu.Unlock()
}

func (g *thresholdLog) ObserveStore(c core.StoreCall) {
	g.mu.Lock()
	g.calls[c.Op]++
	g.mu.Unlock()
}

func (g *thresholdLog) ObserveDecision(res core.Result, src core.Source) {
	if src == core.SourceLease && res.Warning {
		g.leased.Add(1)
	}
}
func (*thresholdLog) ObserveDegraded(core.StoreOutage)  {}
func (*thresholdLog) ObserveRecovered(core.StoreOutage) {}

// total returns the handler's events, the observer's, and the store
// calls of kind op.
func (g *thresholdLog) total(op string) (events, observed, calls int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, n := range g.events {
		events += n
	}
	for _, n := range g.observed {
		observed += n
	}
	return events, observed, g.calls[op]
}

// TestWarningMarks: at 0.8 of a burst of 10, admissions from the eighth
// token on are marked, denials never, and the eighth alone crosses: one
// event, with the limit, the threshold and the window until the bucket
// is full again. A cost that jumps over the threshold crosses too.
func TestWarningMarks(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	log := newThresholdLog()
	lim, err := core.NewMemory(core.WithClock(func() time.Time { return now }), core.WithThresholdHandler(log.handle), core.WithObserver(log))
	if err != nil {
		t.Fatal(err)
	}
	limit := core.PerMinute(10)
	limit.Name = "api"
	r, err := lim.Prepare(limit)
	if err == nil {
		r, err = r.WithWarning(0.8)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 1; i <= 11; i++ {
		res, err := r.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		want := i >= 8 && i <= 10
		if res.Warning != want || res.Allowed != (i <= 10) {
			t.Fatalf("request %d: %+v, want Warning %v", i, res, want)
		}
		if e, _, _ := log.total(core.OpThreshold); e != min(1, max(0, i-7)) {
			t.Fatalf("after request %d: %d events, want %d", i, e, min(1, max(0, i-7)))
		}
	}
	if ev := log.last; ev.Key != "k" || ev.Limit != limit || ev.Threshold != 0.8 || ev.Remaining != 2 || ev.Window != 48*time.Second {
		t.Fatalf("event %+v, want k, api, 0.8, 2 left, a 48s window (8 tokens at 6s each)", ev)
	}
	if log.observed["api"] != 1 {
		t.Fatalf("observed %v, want one event of api", log.observed)
	}
	// Within the window the key crosses again, after a refill: no event.
	now = now.Add(19 * time.Second) // 3 tokens back: 7 used
	if res, _ := r.Allow(ctx, "k"); !res.Allowed || !res.Warning {
		t.Fatalf("%+v, want admitted, marked", res)
	}
	if e, _, _ := log.total(core.OpThreshold); e != 1 {
		t.Fatalf("%d events, want 1: a crossing in the same window", e)
	}
	now = now.Add(49 * time.Second) // 68s after the first crossing, past its window; the bucket is full
	if res, _ := r.Allow(ctx, "k"); !res.Allowed || res.Warning {
		t.Fatalf("%+v, want admitted, not marked", res)
	}
	if res, _ := r.AllowN(ctx, "k", 7); !res.Allowed || !res.Warning { // 1+1+7 = 9 used: crossed by a cost of 7
		t.Fatalf("%+v, want admitted, marked", res)
	}
	if e, _, _ := log.total(core.OpThreshold); e != 2 {
		t.Fatalf("%d events, want 2: a new window", e)
	}
	if _, err := r.WithWarning(0); err == nil {
		t.Fatal("WithWarning(0): no error")
	}
	if _, err := r.WithWarning(math.NaN()); err == nil || !strings.Contains(err.Error(), "WithWarning") {
		t.Fatalf("WithWarning(NaN) = %v, want an error naming WithWarning", err)
	}
	if r.Warning() != 0.8 {
		t.Fatalf("Warning() = %v", r.Warning())
	}
}

// fleetHammer sends n unit requests on each of keys through rules (one
// per limiter instance), from four goroutines per rule, spread so that
// every instance decides some of each key's requests.
func fleetHammer(t *testing.T, rules []*core.Rule, keys []string, n int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, len(rules)*4)
	for ri, r := range rules {
		for g := range 4 {
			wg.Go(func() {
				for i := range n {
					if (i+ri*4+g)%(len(rules)*4) != 0 {
						continue
					}
					for _, k := range keys {
						if _, err := r.Allow(ctx, k); err != nil {
							errs <- err
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestThresholdEventsAcrossFleet: three limiter instances, each with its
// own Redis client, on one real redis-server, hammer 30 keys together
// past a warning threshold: exactly one event per key across the three
// (handler and observer alike), one marker call per key (none beside
// the other decisions), and a Redis marker per key that lives as long
// as the window. Keys reset and hammered again within the window, by
// the same instances and by three new ones (restarted replicas, with no
// memory of the markers), raise none; once Redis has forgotten the
// markers (deleted, as a restart or an eviction would), exactly one more
// per key. Once the markers' window is over
// (a short limit, the markers' TTL on Redis's own clock), a crossing
// raises exactly one event per key again.
func TestThresholdEventsAcrossFleet(t *testing.T) {
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("warn%d:", time.Now().UnixNano())
	log := newThresholdLog()
	instances := func(limit core.Limit) []*core.Rule {
		var rules []*core.Rule
		for range 3 {
			rdb := redistest.NewClient(t, srv.Addr())
			lim, err := core.New(rdb, core.WithPrefix(prefix), core.WithTimeout(10*time.Second), core.WithFallbackReplicas(1),
				core.WithThresholdHandler(log.handle), core.WithObserver(log), core.WithDenyCache(false))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lim.Close() })
			r, err := lim.Prepare(limit)
			if err == nil {
				r, err = r.WithWarning(0.5)
			}
			if err != nil {
				t.Fatal(err)
			}
			rules = append(rules, r)
		}
		return rules
	}
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = "tenant:" + strconv.Itoa(i)
	}
	ctx := context.Background()
	rdb := redistest.NewClient(t, srv.Addr())
	markers := func() int {
		t.Helper()
		n, err := rdb.Keys(ctx, prefix+"*~w0:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(n)
	}
	// check checks the events and marker calls so far: a marker call is
	// made only by a crossing that the instance's memory does not know
	// to be in a marked window, so at most one per key per phase.
	check := func(phase string, wantEvents, minCalls, maxCalls int) {
		t.Helper()
		e, o, c := log.total(core.OpThreshold)
		if e != wantEvents || o != wantEvents || c < minCalls || c > maxCalls {
			t.Fatalf("%s: %d events, %d observed, %d marker calls; want %d, %d, %d to %d", phase, e, o, c, wantEvents, wantEvents, minCalls, maxCalls)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		for _, k := range keys {
			if log.events[k] != wantEvents/len(keys) {
				t.Fatalf("%s: key %s had %d events, want %d", phase, k, log.events[k], wantEvents/len(keys))
			}
		}
	}

	// A day's 100 refills one token in 864s: within the test, each key
	// crosses 50 used exactly once.
	day := core.Limit{Name: "daily", Rate: 100, Period: 24 * time.Hour, Burst: 100}
	rules := instances(day)
	fleetHammer(t, rules, keys, 80)
	n := len(keys)
	check("first crossing", n, n, n)
	if m := markers(); m != n {
		t.Fatalf("%d markers in Redis, want %d", m, n)
	}
	names, err := rdb.Keys(ctx, prefix+"*~w0:"+keys[0]).Result()
	if err != nil || len(names) != 1 {
		t.Fatalf("marker of %s: %v, %v", keys[0], names, err)
	}
	ttl, err := rdb.PTTL(ctx, names[0]).Result()
	if err != nil || ttl < 11*time.Hour || ttl > 12*time.Hour+time.Second {
		t.Fatalf("marker TTL %v (%v), want about 12h: the time to refill 50 tokens of 100 a day", ttl, err)
	}
	for _, k := range keys {
		if err := rules[0].Reset(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	fleetHammer(t, rules, keys, 80)
	check("same window, same instances", n, n, 2*n)
	for _, k := range keys {
		if err := rules[0].Reset(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	before := log.calls[core.OpThreshold]
	fleetHammer(t, instances(day), keys, 80)
	check("same window, restarted instances", n, before+n, before+n) // no memory: Redis's marker decides

	// Redis forgets the markers (a restart without persistence, a
	// lost-write failover, an eviction): the next crossing of each key
	// raises one more event, once across the fleet.
	names, err = rdb.Keys(ctx, prefix+"*~w0:*").Result()
	if err != nil || len(names) != n {
		t.Fatalf("markers %d, %v; want %d", len(names), err, n)
	}
	if err := rdb.Del(ctx, names...).Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := rules[0].Reset(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	before = log.calls[core.OpThreshold]
	fleetHammer(t, instances(day), keys, 80)
	check("markers forgotten", 2*n, before+n, before+n)

	// A short limit: 10 per 6s, so the window of a crossing at 5 used is
	// 3s. The markers expire on Redis's clock; the test polls for that.
	short := core.Limit{Name: "short", Rate: 10, Period: 6 * time.Second, Burst: 10}
	rules = instances(short)
	before = log.calls[core.OpThreshold]
	fleetHammer(t, rules, keys, 10)
	// (A refill during the hammering may make a key cross again, and
	// its instance ask: more calls, never more events.)
	check("short limit, first window", 3*n, before+n, before+3*n)
	deadline := time.Now().Add(time.Minute) // a hang guard
	for markers() > len(keys) {             // the daily limit's stay
		if time.Now().After(deadline) {
			t.Fatal("the short limit's markers outlived their window")
		}
		time.Sleep(50 * time.Millisecond) // polling Redis's TTL, the behaviour under test
	}
	for _, k := range keys {
		if err := rules[0].Reset(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	before = log.calls[core.OpThreshold]
	fleetHammer(t, rules, keys, 10)
	check("short limit, second window", 4*n, before+n, before+3*n)
}

// TestWarningFallback: while Redis cannot be reached, the local fallback
// marks admissions over the threshold of the limit it enforces (here the
// whole limit: one replica), and raises no event: no marker can be set.
func TestWarningFallback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // connections are refused from now on
	log := newThresholdLog()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	lim, err := core.New(rdb, core.WithFallbackReplicas(1), core.WithLogger(slog.New(slog.DiscardHandler)),
		core.WithThresholdHandler(log.handle), core.WithObserver(log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	r, err := lim.Prepare(core.PerMinute(4))
	if err == nil {
		r, err = r.WithWarning(0.5)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true, true, true, false} {
		res, err := r.Allow(context.Background(), "k")
		if err != nil || !res.Degraded || res.Warning != want || res.Allowed != (i < 4) {
			t.Fatalf("request %d: %+v, %v; want degraded, Warning %v", i+1, res, err, want)
		}
	}
	if e, o, c := log.total(core.OpThreshold); e != 0 || o != 0 || c != 0 {
		t.Fatalf("%d events, %d observed, %d marker calls; want none", e, o, c)
	}
}

// TestWarningTokenLeases: three instances with token leases hammer one
// key past its threshold until it is denied. Admissions from leases are
// marked as the store's are, and the key raises at most one event across
// the three (a crossing judged on a replica's view of the bucket may go
// unseen, never counted twice: the marker decides).
func TestWarningTokenLeases(t *testing.T) {
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("warnlease%d:", time.Now().UnixNano())
	log := newThresholdLog()
	limit := core.Limit{Rate: 2000, Period: time.Second, Burst: 4000}
	var marked, denied sync.Map
	var wg sync.WaitGroup
	for i := range 3 {
		lim, err := core.New(redistest.NewClient(t, srv.Addr()), core.WithPrefix(prefix), core.WithTimeout(10*time.Second), core.WithFallbackReplicas(1),
			core.WithThresholdHandler(log.handle), core.WithObserver(log))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		r, err := lim.Prepare(limit)
		if err == nil {
			r, err = r.WithWarning(0.5)
		}
		if err == nil {
			r, err = r.WithTokenLeases(core.LeaseBound{Fraction: 0.05})
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.Warning() != 0.5 {
			t.Fatalf("WithTokenLeases dropped the threshold: %v", r.Warning())
		}
		for g := range 4 {
			wg.Go(func() {
				for range 50_000 { // a hang guard: the key is denied well before
					res, err := r.Allow(context.Background(), "hot")
					if err != nil {
						t.Error(err)
						return
					}
					if !res.Allowed {
						denied.Store(i*4+g, true)
						return
					}
					if res.Warning {
						marked.Store(i*4+g, true)
					}
				}
			})
		}
	}
	wg.Wait()
	count := func(m *sync.Map) (n int) {
		m.Range(func(any, any) bool { n++; return true })
		return n
	}
	if count(&denied) != 12 || count(&marked) == 0 || log.leased.Load() == 0 {
		t.Fatalf("%d of 12 goroutines denied, %d saw a marked admission, %d marked from leases; want 12, some, some", count(&denied), count(&marked), log.leased.Load())
	}
	if e, _, _ := log.total(core.OpThreshold); e > 1 {
		t.Fatalf("%d threshold events for one key in one window, want at most 1", e)
	} else {
		t.Logf("%d threshold event(s)", e)
	}
}
