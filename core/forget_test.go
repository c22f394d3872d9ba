package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/sluicehq/sluice/redistest"
)

// capAfterLoss runs the scenario of a cap across a lost Redis state: limiter
// a holds every slot (cap most, lease 1s) in long requests; forget makes
// Redis lose the state; limiters b and c, which knew the node before, try
// to take slots for the next window. It returns the most slots ever in
// flight (a's held ones plus those b and c took), how many of a's leases
// Redis held again after the window, and a's releases' errors.
type capLoss struct {
	peak       int64 // most in flight at once: a's leases plus newcomers'
	taken      int64 // newcomers' acquisitions while a held every slot
	reheld     int64 // a's leases in Redis after the window
	releaseOK  int   // a's releases that returned nil
	releaseErr error // the first of a's releases' errors, if any
}

// check fails t unless the cap of most held: never more in flight, and
// every one of the holder's leases held again and released without error.
func (got capLoss) check(t *testing.T, after string, most int64) {
	t.Helper()
	t.Logf("after %s: %+v", after, got)
	if got.peak > most {
		t.Errorf("in flight reached %d for a cap of %d (newcomers took %d slots)", got.peak, most, got.taken)
	}
	if got.reheld != most || int64(got.releaseOK) != most {
		t.Errorf("the holder's leases: %d of %d held again in Redis, %d released without error (first error: %v); want all", got.reheld, most, got.releaseOK, got.releaseErr)
	}
}

// storedAcquire is c.Acquire(key) as Redis answers it: a degraded answer
// (a pause of this process, as under under-load --stall, can outlast a
// short budget, and the fallback answers, or a FailClosed limiter
// refuses with ErrUnavailable) is given back and asked again,
// for up to 5 s. The scenarios' starting state is Redis's, not a
// fallback's.
func storedAcquire(t *testing.T, c *Concurrency, key string) *Lease {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(5 * time.Second); ; {
		ls, err := c.Acquire(ctx, key)
		switch {
		case err != nil && !errors.Is(err, ErrUnavailable):
			t.Fatalf("Acquire(%q): %v", key, err)
		case err == nil && !ls.Degraded:
			return ls
		case time.Now().After(deadline):
			t.Fatalf("Acquire(%q): still decided without Redis after 5 s: %+v, %v", key, ls, err)
		}
		_ = ls.Release(ctx) // a FailClosed limiter's refusal: ls is nil
	}
}

// capAfterLoss runs the story against addr; forget makes Redis lose the
// state and returns the address of the server that then holds it.
func capAfterLoss(t *testing.T, addr string, most int, window time.Duration, forget func() string) capLoss {
	t.Helper()
	return capAfterLossOn(t, func(opts ...Option) *Limiter { return newRedisLimiter(t, addr, opts...) }, addr, most, window, forget)
}

// capAfterLossOn is capAfterLoss with limiters made by newLim.
func capAfterLossOn(t *testing.T, newLim func(...Option) *Limiter, addr string, most int, window time.Duration, forget func() string) capLoss {
	t.Helper()
	prefix := uniquePrefix()
	quiet := WithLogger(slog.New(slog.DiscardHandler))
	mk := func(opts ...Option) *Concurrency {
		lim := newLim(append([]Option{WithPrefix(prefix), WithTimeout(200 * time.Millisecond), quiet}, opts...)...)
		t.Cleanup(func() { _ = lim.Close() })
		c, err := lim.PrepareConcurrency(ConcurrencyLimit{Name: "streams", Max: most, Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The newcomers fail closed: this measures what Redis admits, not
	// what a local fallback adds while the node is down (see
	// TestCapOutageBound).
	a, b, c := mk(), mk(WithFailurePolicy(FailClosed)), mk(WithFailurePolicy(FailClosed))
	ctx := context.Background()
	var held []*Lease
	for range most {
		ls := storedAcquire(t, a, "stream")
		if !ls.Acquired {
			t.Fatalf("a: %+v", ls)
		}
		held = append(held, ls)
	}
	// b and c have met the node: their first try is refused at the cap.
	for _, n := range []*Concurrency{b, c} {
		if ls := storedAcquire(t, n, "stream"); ls.Acquired {
			t.Fatalf("a newcomer before the loss: %+v; want refused", ls)
		}
	}
	var newcomers, peak atomic.Int64
	after := forget()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var theirs []*Lease
	deadline := time.Now().Add(window)
	for _, n := range []*Concurrency{b, c} {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				ls, err := n.Acquire(ctx, "stream")
				if err == nil && ls.Acquired {
					in := int64(most) + newcomers.Add(1)
					for p := peak.Load(); in > p && !peak.CompareAndSwap(p, in); p = peak.Load() {
					}
					mu.Lock()
					theirs = append(theirs, ls) // held to the end: long requests
					mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	out := capLoss{peak: max(int64(most), peak.Load()), taken: newcomers.Load()}
	rdb := redistest.NewClient(t, after)
	for _, ls := range held {
		if _, err := rdb.ZScore(ctx, ls.rkey, ls.id).Result(); err == nil {
			out.reheld++
		}
	}
	for _, ls := range held {
		if err := ls.Release(ctx); err == nil {
			out.releaseOK++
		} else if out.releaseErr == nil {
			out.releaseErr = err
		}
	}
	for _, ls := range theirs {
		_ = ls.Release(ctx)
	}
	return out
}

// TestCapAcrossRestart: one instance holds all 10 slots of a cap (lease
// 1s) in long requests; Redis is killed and restarted empty; two other
// instances try for 1.5s (the grace period and after it) to take slots.
// The cap is never exceeded: the holder's renewals re-assert its leases,
// and the newcomers are refused meanwhile. Its releases then succeed.
func TestCapAcrossRestart(t *testing.T) {
	srv := redistest.Start(t)
	got := capAfterLoss(t, srv.Addr(), 10, 1500*time.Millisecond, func() string {
		srv.Kill()
		srv.Restart()
		return srv.Addr()
	})
	got.check(t, "a restart", 10)
}

// startBlind starts a redis-server whose only user may run every command
// but the @dangerous ones (LASTSAVE and INFO among them), a common
// hardening and managed-service default, and returns its server and a
// function making limiters logged in as that user. The default user stays,
// for the test's own checks.
func startBlind(t *testing.T) (*redistest.Server, func(...Option) *Limiter) {
	t.Helper()
	srv := redistest.Start(t, "--user", "app", "on", ">pw", "~*", "&*", "+@all", "-@dangerous")
	return srv, func(opts ...Option) *Limiter {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "pw", ContextTimeoutEnabled: true, MaxRetries: -1,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
		t.Cleanup(func() { _ = rdb.Close() })
		lim, err := New(rdb, append([]Option{WithTimeout(10 * time.Second), WithFallbackReplicas(1)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
}

// TestCapWithoutDangerousCommands: on a user without @dangerous (no
// LASTSAVE, no INFO), a cap of 10 shared by three replicas holds 10 slots
// in all, every one decided by Redis. Before, every acquisition failed on
// LASTSAVE and fell back: 10 per replica, while Ready said all was well.
func TestCapWithoutDangerousCommands(t *testing.T) {
	_, newLim := startBlind(t)
	ctx := context.Background()
	prefix := WithPrefix(uniquePrefix())
	taken := 0
	for range 3 {
		lim := newLim(prefix, WithLogger(quietLogger()))
		t.Cleanup(func() { _ = lim.Close() })
		if err := lim.Ready(ctx); err != nil {
			t.Fatalf("Ready: %v", err)
		}
		c, err := lim.PrepareConcurrency(ConcurrencyLimit{Name: "jobs", Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			ls, err := c.Acquire(ctx, "tenant:a")
			if err != nil {
				t.Fatal(err)
			}
			if ls.Degraded {
				t.Fatalf("an acquisition was decided by the fallback: %+v", ls)
			}
			if ls.Acquired {
				taken++
			}
		}
	}
	if taken != 10 {
		t.Errorf("three replicas took %d slots of a cap of 10, want 10", taken)
	}
}

// TestCapAcrossRestartBlind is TestCapAcrossRestart on a user without
// @dangerous: the scripts cannot read the server's identity, and tell the
// restart by the tag's epoch, which went with the data. The newcomers are
// refused while the holder re-asserts its leases.
func TestCapAcrossRestartBlind(t *testing.T) {
	srv, newLim := startBlind(t)
	got := capAfterLossOn(t, newLim, srv.Addr(), 10, 1500*time.Millisecond, func() string {
		srv.Kill()
		srv.Restart()
		return srv.Addr()
	})
	got.check(t, "a restart, blind", 10)
}

// TestCapAcrossFailover: as TestCapAcrossRestart, but the state is lost
// by a failover: the master's replication link is cut before the holder
// takes its 10 slots, so its replica never hears of them, and then the
// replica is promoted and the clients' one address (a Sentinel client, a
// DNS name) leads to it. The newcomers, who had met the old master, notice
// another server and keep the key in its grace period for a lease: the
// cap is never exceeded, and the holder re-asserts all 10 leases.
func TestCapAcrossFailover(t *testing.T) {
	master := redistest.Start(t)
	front := redistest.NewProxy(t, master.Addr())
	promote, replica := failoverLosing(t, master, front)
	got := capAfterLoss(t, front.Addr(), 10, 1500*time.Millisecond, func() string {
		promote()
		return replica
	})
	got.check(t, "a failover that lost the acquisitions", 10)
}

// TestCapAcrossClusterFailover: on a real Cluster, one instance holds 5
// of a key's 10 slots and another has met the key's master; the master's
// replica takes over (CLUSTER FAILOVER). The new master is a node the
// limiters meet for the first time; its previous replication history is
// the old master's, so the newcomer keeps the key in its grace period for
// a lease (it cannot know whether the failover lost acquisitions), and is
// admitted after it; the holder's leases are renewed on the new master.
// Before, the newcomer was admitted at once.
func TestCapAcrossClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	ctx := context.Background()
	cl := redistest.StartCluster(t)
	prefix := uniquePrefix()
	mk := func(opts ...Option) *Concurrency {
		rdb := cl.Client(t)
		if err := rdb.Ping(ctx).Err(); err != nil { // the slot map, before any budget
			t.Fatal(err)
		}
		lim, err := New(rdb, append([]Option{WithPrefix(prefix), WithTimeout(time.Second), WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lim.Close() })
		c, err := lim.PrepareConcurrency(ConcurrencyLimit{Name: "streams", Max: 10, Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := mk(), mk(WithFailurePolicy(FailClosed))
	var held []*Lease
	for range 5 {
		ls, err := a.Acquire(ctx, "stream")
		if err != nil || !ls.Acquired || ls.Degraded {
			t.Fatalf("a: %+v, %v", ls, err)
		}
		held = append(held, ls)
	}
	ls, err := b.Acquire(ctx, "stream") // b meets the key's master
	if err != nil || !ls.Acquired {
		t.Fatalf("b before the failover: %+v, %v", ls, err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	slot := redistest.Slot(held[0].rkey)
	old := cl.MasterOf(slot)
	mc := redistest.NewClient(t, old)
	id, err := mc.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	lines, err := mc.Do(ctx, "CLUSTER", "REPLICAS", id).StringSlice()
	if err != nil || len(lines) == 0 {
		t.Fatalf("CLUSTER REPLICAS of %s: %v, %v", old, lines, err)
	}
	f := strings.Fields(lines[0])
	replica, _, _ := strings.Cut(f[1], "@")
	if err := redistest.NewClient(t, replica).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); cl.MasterOf(slot) != replica; {
		if time.Now().After(deadline) {
			t.Fatalf("slot %d still on %s 10s after CLUSTER FAILOVER on %s", slot, cl.MasterOf(slot), replica)
		}
		time.Sleep(20 * time.Millisecond)
	}
	switched := time.Now()
	cl.WaitHealthy()
	// b's first answer from the new master: refused, though 5 of 10 are free.
	var first *Lease
	for deadline := time.Now().Add(5 * time.Second); first == nil; {
		if ls, err := b.Acquire(ctx, "stream"); err == nil && !ls.Degraded {
			first = ls
		} else if time.Now().After(deadline) {
			t.Fatalf("b after the failover: no answer from Redis in 5s (%+v, %v)", ls, err)
		}
	}
	if first.Acquired {
		for _, sv := range redisOf(b.lim).Seen() {
			t.Logf("b knows %s", sv)
		}
		t.Fatalf("b right after the failover took a slot (%d in flight): want refused for the grace period", first.InFlight)
	}
	// After a lease (and the grace's slack), b is admitted.
	var took time.Duration
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ls, err := b.Acquire(ctx, "stream")
		if err == nil && ls.Acquired && !ls.Degraded {
			took = time.Since(switched)
			_ = ls.Release(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b still refused 5s after the failover: %+v, %v", ls, err)
		}
	}
	t.Logf("b admitted %v after the switch", took)
	for _, ls := range held {
		if err := ls.Release(ctx); err != nil {
			t.Errorf("a's lease after the failover: %v, want renewed on the new master", err)
		}
	}
}

// TestReassertWithinCap: the lease set of a key is deleted (as an
// eviction under allkeys-* would), a newcomer takes two of the three
// slots, and then the holder of all three renews: one lease is re-asserted,
// the two that would exceed the cap are refused, and their releases say
// the leases were lost. Redis never holds more than the cap.
func TestReassertWithinCap(t *testing.T) {
	addr := redistest.Start(t).Addr()
	prefix := uniquePrefix()
	mk := func() *Concurrency {
		lim := newRedisLimiter(t, addr, WithPrefix(prefix))
		t.Cleanup(func() { _ = lim.Close() })
		c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 3, Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := mk(), mk()
	ctx := context.Background()
	var held []*Lease
	for range 3 {
		ls, err := a.Acquire(ctx, "k")
		if err != nil || !ls.Acquired {
			t.Fatalf("%+v, %v", ls, err)
		}
		held = append(held, ls)
	}
	rdb := redistest.NewClient(t, addr)
	rkey := held[0].rkey
	if err := rdb.Del(ctx, rkey).Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if ls, err := b.Acquire(ctx, "k"); err != nil || !ls.Acquired {
			t.Fatalf("newcomer after the deletion: %+v, %v", ls, err)
		}
	}
	// Within two renewal rounds (a third of the lease each) every lease of
	// a has been renewed or found lost.
	deadline := time.Now().Add(2 * time.Second)
	for {
		k := a.lim.keeper()
		k.mu.Lock()
		left := len(k.leases)
		k.mu.Unlock()
		n, err := rdb.ZCard(ctx, rkey).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > 3 {
			t.Fatalf("the set holds %d leases for a cap of 3", n)
		}
		if left == 1 && n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: a renews %d leases, the set holds %d; want 1 re-asserted, 3 in all", 2*time.Second, left, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var lost, ok int
	for _, ls := range held {
		switch err := ls.Release(ctx); {
		case err == nil:
			ok++
		case errors.Is(err, ErrLeaseLost):
			lost++
		default:
			t.Fatal(err)
		}
	}
	if ok != 1 || lost != 2 {
		t.Errorf("releases: %d fine, %d lost; want 1 and 2", ok, lost)
	}
}

// TestPoisonedLeases: members scored far in the future or +inf, and a set
// written without an expiry, hold a slot for one lease at most: the
// scripts clamp every score to now + lease.
func TestPoisonedLeases(t *testing.T) {
	addr := redistest.Start(t).Addr()
	lim := newRedisLimiter(t, addr)
	t.Cleanup(func() { _ = lim.Close() })
	const lease = 300 * time.Millisecond
	c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 2, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rdb := redistest.NewClient(t, addr)
	rkey := redisOf(lim).RKey(c.fp, "k")
	if err := rdb.ZAdd(ctx, rkey, redis.Z{Score: math.Inf(1), Member: "forever"}, redis.Z{Score: 9e15, Member: "year-285000"}).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ls, err := c.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if ls.Acquired {
		t.Fatalf("the poisoned members held no slot at all: %+v", ls)
	}
	for !ls.Acquired {
		if time.Since(start) > 3*lease {
			t.Fatalf("the key still locked %v after the poisoned members were found (lease %v)", time.Since(start), lease)
		}
		time.Sleep(20 * time.Millisecond)
		if ls, err = c.Acquire(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("a slot was free %v after the poisoned members were found (lease %v)", time.Since(start).Round(time.Millisecond), lease)
	if ttl, err := rdb.PTTL(ctx, rkey).Result(); err != nil || ttl != -1 {
		t.Errorf("PTTL of the lease set = %v, %v; want -1 (no expiry: volatile-* cannot evict it)", ttl, err)
	}
	_ = ls.Release(ctx)
}

// TestForeignLeaseSet: a value of another type in a cap's key is deleted,
// the cap counts from zero, and the limiter logs it once, naming the key.
func TestForeignLeaseSet(t *testing.T) {
	addr := redistest.Start(t).Addr()
	var logs syncBuffer
	lim := newRedisLimiter(t, addr, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	t.Cleanup(func() { _ = lim.Close() })
	c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 1, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rdb := redistest.NewClient(t, addr)
	for _, key := range []string{"a", "b"} {
		if err := rdb.Set(ctx, redisOf(lim).RKey(c.fp, key), "not a lease set", 0).Err(); err != nil {
			t.Fatal(err)
		}
		ls, err := c.Acquire(ctx, key)
		if err != nil || !ls.Acquired || ls.Degraded {
			t.Fatalf("Acquire(%q) over a string = %+v, %v; want a slot from Redis", key, ls, err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "another type"); n != 1 || !strings.Contains(out, redisOf(lim).RKey(c.fp, "a")) {
		t.Errorf("log = %q; want one line naming the key", out)
	}
}

// TestCapOutageBound measures a cap through an outage under FallbackLocal:
// three replicas (WithFallbackReplicas(3), so a local share of 3 of 10);
// the first holds all 10 slots in Redis; Redis is killed, stays down for
// 1.2s (longer than the 1s lease) and comes back empty; all three keep
// trying for slots, holding what they get. In flight: the 10 held, plus at
// most each replica's local share while Redis is down (3 × 3), and nothing
// Redis admits after it is back, while the holder re-asserts its 10:
// Max + replicas × share, here 19, never more.
func TestCapOutageBound(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	prefix := uniquePrefix()
	const most = 10
	var caps []*Concurrency
	for range 3 {
		lim := newRedisLimiter(t, addr, WithPrefix(prefix), WithTimeout(100*time.Millisecond),
			WithFallbackReplicas(3), WithLogger(slog.New(slog.DiscardHandler)))
		t.Cleanup(func() { _ = lim.Close() })
		c, err := lim.PrepareConcurrency(ConcurrencyLimit{Name: "streams", Max: most, Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		caps = append(caps, c)
	}
	ctx := context.Background()
	var held []*Lease
	for range most {
		ls := storedAcquire(t, caps[0], "stream")
		if !ls.Acquired {
			t.Fatalf("%+v", ls)
		}
		held = append(held, ls)
	}
	for _, c := range caps[1:] {
		if ls := storedAcquire(t, c, "stream"); ls.Acquired {
			t.Fatalf("before the outage: %+v; want refused", ls)
		}
	}
	var mu sync.Mutex
	var extra []*Lease
	var local, byRedis int
	try := func(until time.Time) {
		var wg sync.WaitGroup
		for _, c := range caps {
			wg.Go(func() {
				for time.Now().Before(until) {
					if ls, err := c.Acquire(ctx, "stream"); err == nil && ls.Acquired {
						mu.Lock()
						extra = append(extra, ls)
						if ls.Degraded {
							local++
						} else {
							byRedis++
						}
						mu.Unlock()
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
		wg.Wait()
	}
	srv.Kill()
	try(time.Now().Add(1200 * time.Millisecond))
	srv.Restart()
	try(time.Now().Add(1500 * time.Millisecond))
	peak := most + local + byRedis
	t.Logf("in flight at most %d for a cap of %d: %d held in Redis before the outage, %d taken by the local fallback, %d by Redis after it",
		peak, most, most, local, byRedis)
	if bound := most + 3*max(1, most/3); peak > bound || byRedis > 0 {
		t.Errorf("in flight reached %d (%d by Redis after the outage); want at most %d, none by Redis", peak, byRedis, bound)
	}
	for _, ls := range append(held, extra...) {
		_ = ls.Release(ctx)
	}
}

// TestPoisonedBucketLock: a bucket value with a lock in the far future and
// no expiry (no script writes one) locks the key for one penalty at most,
// in the lone form and in the batch form (two limits), with a penalty and
// without; the value is then written with an expiry.
func TestPoisonedBucketLock(t *testing.T) {
	addr := redistest.Start(t).Addr()
	ctx := context.Background()
	rdb := redistest.NewClient(t, addr)
	const penalty = 200 * time.Millisecond
	for _, tc := range []struct {
		name    string
		limits  []Limit
		penalty time.Duration
	}{
		// One limit: 5 a minute, so an admitted token is 12 s of debt and
		// the key's expiry outlives a stalled test between the decision and
		// the PTTL below (at 5 a second it was 200 ms, and a Valkey run
		// under CI's load once found the key gone). Two limits: an hour's.
		{"one limit, no penalty", []Limit{PerMinute(5)}, 0},
		{"one limit, a penalty", []Limit{PerMinute(5)}, penalty},
		{"two limits, no penalty", []Limit{PerSecond(5), PerHour(1000)}, 0},
		{"two limits, a penalty", []Limit{PerSecond(5), PerHour(1000)}, penalty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := newRedisLimiter(t, addr, WithPrefix(uniquePrefix()), WithPenalty(tc.penalty))
			p, err := lim.plans.get(tc.limits)
			if err != nil {
				t.Fatal(err)
			}
			rkey := redisOf(lim).RKey(p.FP, "k")
			far := time.Now().Add(50 * 365 * 24 * time.Hour).UnixMicro()
			fields := []string{strconv.FormatInt(far, 10)}
			for range tc.limits {
				fields = append(fields, "0", "0")
			}
			if err := rdb.Set(ctx, rkey, strings.Join(fields, " "), 0).Err(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var r Result
			for {
				if r, err = lim.Allow(ctx, "k", tc.limits...); err != nil {
					t.Fatal(err)
				}
				if r.Allowed || time.Since(start) > tc.penalty+time.Second {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			took := time.Since(start)
			if !r.Allowed || r.Degraded {
				t.Fatalf("still locked %v after the poisoned lock was found (penalty %v): %+v", took, tc.penalty, r)
			}
			if tc.penalty == 0 && took > 100*time.Millisecond {
				t.Errorf("without a penalty the first decision should admit; it took %v", took)
			}
			if ttl, err := rdb.PTTL(ctx, rkey).Result(); err != nil || ttl <= 0 {
				t.Errorf("PTTL after the decisions = %v, %v; want an expiry", ttl, err)
			}
			t.Logf("admitted %v after the poisoned lock was found", took.Round(time.Millisecond))
		})
	}
}

// TestForeignBucket: a value of another type where a bucket belongs is
// replaced at the first decision (decided by the fallback), logged once
// naming the key; the key's next decisions are Redis's again.
func TestForeignBucket(t *testing.T) {
	addr := redistest.Start(t).Addr()
	ctx := context.Background()
	rdb := redistest.NewClient(t, addr)
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			var logs syncBuffer
			opts := []Option{WithPrefix(uniquePrefix()), WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}
			if !batched {
				opts = append(opts, WithBatching(0))
			}
			lim := newRedisLimiter(t, addr, opts...)
			p, err := lim.plans.get([]Limit{PerSecond(5)})
			if err != nil {
				t.Fatal(err)
			}
			rkey := redisOf(lim).RKey(p.FP, "k")
			if err := rdb.HSet(ctx, rkey, "f", "v").Err(); err != nil {
				t.Fatal(err)
			}
			var degraded []bool
			for range 4 {
				r, err := lim.Allow(ctx, "k", PerSecond(5))
				if err != nil {
					t.Fatal(err)
				}
				degraded = append(degraded, r.Degraded)
			}
			if fmt.Sprint(degraded) != "[true false false false]" {
				t.Errorf("degraded: %v; want the first decision only", degraded)
			}
			if typ, _ := rdb.Type(ctx, rkey).Result(); typ != "string" {
				t.Errorf("the key's type after: %q, want a bucket (string)", typ)
			}
			out := logs.String()
			if n := strings.Count(out, "another type"); n != 1 || !strings.Contains(out, rkey) {
				t.Errorf("log = %q; want one line naming %s", out, rkey)
			}
		})
	}
}

// TestHugeBucketValue: a 10 MB value where a bucket belongs, one that
// parses (a 10 MB number) and one that does not, is read once and
// overwritten by the first decision: the key is then decided from a
// normal bucket, and the other keys of the node are not slowed.
func TestHugeBucketValue(t *testing.T) {
	addr := redistest.Start(t).Addr()
	ctx := context.Background()
	// Writing 10 MB may outlast redistest.NewClient's 1s timeouts on a
	// loaded machine.
	rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	for _, tc := range []struct{ name, value string }{
		{"digits", "0 " + strings.Repeat("9", 10<<20) + " 0"},
		{"bytes", strings.Repeat("x", 10<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := newRedisLimiter(t, addr, WithPrefix(uniquePrefix()))
			p, err := lim.plans.get([]Limit{PerSecond(5)})
			if err != nil {
				t.Fatal(err)
			}
			rkey := redisOf(lim).RKey(p.FP, "huge")
			if err := rdb.Set(ctx, rkey, tc.value, 0).Err(); err != nil {
				t.Fatal(err)
			}
			r, err := lim.Allow(ctx, "huge", PerSecond(5))
			if err != nil || !r.Allowed {
				t.Fatalf("the first decision on the huge value: %+v, %v; want admitted (read as a full bucket)", r, err)
			}
			if n, err := rdb.StrLen(ctx, rkey).Result(); err != nil || n > 64 {
				t.Fatalf("the value is %d bytes after a decision (%v); want a bucket's few", n, err)
			}
			start := time.Now()
			for i := range 200 {
				key := "huge"
				if i%2 == 1 {
					key = "other:" + strconv.Itoa(i)
				}
				if _, err := lim.Allow(ctx, key, PerSecond(5)); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("200 decisions after the huge value was replaced: %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestCapAcrossRestartDecisionsFirst: a replica that had only made rate
// decisions on the node before the restart (no slot taken: its first
// answer's INFO told it which server that was) is held back by the grace
// period too.
func TestCapAcrossRestartDecisionsFirst(t *testing.T) {
	srv := redistest.Start(t)
	prefix := uniquePrefix()
	mk := func(opts ...Option) (*Limiter, *Concurrency) {
		lim := newRedisLimiter(t, srv.Addr(), append([]Option{WithPrefix(prefix), WithTimeout(200 * time.Millisecond),
			WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
		t.Cleanup(func() { _ = lim.Close() })
		c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 3, Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return lim, c
	}
	_, a := mk()
	blim, b := mk(WithFailurePolicy(FailClosed))
	ctx := context.Background()
	// The replica learns which server the node is from the INFO its
	// first answer starts in the background; a read that failed (a busy
	// machine) is made again at a later answer.
	for deadline := time.Now().Add(10 * time.Second); redisOf(blim).WholeSeenRun() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the replica never learnt which server the node is")
		}
		if _, err := blim.Allow(ctx, "x", PerSecond(1000)); err != nil {
			t.Fatal(err)
		}
		redisOf(blim).WaitBackground()
	}
	for range 3 {
		if ls, err := a.Acquire(ctx, "k"); err != nil || !ls.Acquired {
			t.Fatalf("%+v, %v", ls, err)
		}
	}
	srv.Kill()
	srv.Restart()
	restarted := time.Now()
	for time.Since(restarted) < time.Second {
		if ls, err := b.Acquire(ctx, "k"); err == nil && ls.Acquired {
			t.Fatalf("a newcomer took a slot %v after the restart, while the holder of all 3 could still re-assert", time.Since(restarted))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPoisonedBucketArrival: a bucket value without an expiry whose
// arrival time is fifty years ahead (a debt no script writes, as every
// value the scripts write has an expiry) is read as a full bucket and
// overwritten, for a key of one limit and of two, never denying the key
// for good.
func TestPoisonedBucketArrival(t *testing.T) {
	addr := redistest.Start(t).Addr()
	ctx := context.Background()
	rdb := redistest.NewClient(t, addr)
	far := strconv.FormatInt(time.Now().Add(50*365*24*time.Hour).UnixMicro(), 10)
	for _, tc := range []struct {
		name   string
		limits []Limit
		value  string
	}{
		// One limit: 5 a minute, so an admitted token is 12 s of debt and
		// the key's expiry outlives a stalled test between the decision and
		// the PTTL below (at 5 a second it was 200 ms, and a Valkey run
		// under CI's load once found the key gone). Two limits: an hour's.
		{"one limit", []Limit{PerMinute(5)}, "0 " + far + " 0"},
		{"two limits", []Limit{PerSecond(5), PerHour(1000)}, "0 " + far + " 0 " + far + " 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := newRedisLimiter(t, addr, WithPrefix(uniquePrefix()))
			p, err := lim.plans.get(tc.limits)
			if err != nil {
				t.Fatal(err)
			}
			rkey := redisOf(lim).RKey(p.FP, "k")
			if err := rdb.Set(ctx, rkey, tc.value, 0).Err(); err != nil {
				t.Fatal(err)
			}
			r, err := lim.Allow(ctx, "k", tc.limits...)
			if err != nil || !r.Allowed || r.Degraded {
				t.Fatalf("first decision after the poisoned arrival: %+v, %v; want admitted by Redis", r, err)
			}
			if ttl, err := rdb.PTTL(ctx, rkey).Result(); err != nil || ttl <= 0 {
				t.Errorf("PTTL after the decision = %v, %v; want an expiry", ttl, err)
			}
		})
	}
}

// TestPoisonedBeyondDuration: a bucket value with an expiry whose lock or
// arrival lies beyond what a time.Duration holds (no script writes one;
// some other writer did). Redis's answer for it would overflow a
// Duration (a lock) or the script's integers (an arrival), so it does not
// decode: each decision of the key is made under the failure policy, with
// durations in range (before, a key of two limits came back locked with a
// RetryAfter of minus 120 years), and the cause is logged once, naming the
// key. Other keys are not affected.
func TestPoisonedBeyondDuration(t *testing.T) {
	addr := redistest.Start(t).Addr()
	ctx := context.Background()
	rdb := redistest.NewClient(t, addr)
	const beyond = "9000000000000000000" // µs since 1970: about 285,000 years ahead
	for _, tc := range []struct {
		name   string
		limits []Limit
		value  string
	}{
		{"one limit, a lock", []Limit{PerMinute(5)}, beyond + " 0 0"},
		{"one limit, an arrival", []Limit{PerMinute(5)}, "0 " + beyond + " 0"},
		{"two limits, a lock", []Limit{PerSecond(5), PerHour(1000)}, beyond + " 0 0 0 0"},
		{"two limits, an arrival", []Limit{PerSecond(5), PerHour(1000)}, "0 0 0 " + beyond + " 0"},
	} {
		for _, batched := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/batched=%v", tc.name, batched), func(t *testing.T) {
				var logs syncBuffer
				opts := []Option{WithPrefix(uniquePrefix()), WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}
				if !batched {
					opts = append(opts, WithBatching(0))
				}
				lim := newRedisLimiter(t, addr, opts...)
				p, err := lim.plans.get(tc.limits)
				if err != nil {
					t.Fatal(err)
				}
				rkey := redisOf(lim).RKey(p.FP, "k")
				if err := rdb.Set(ctx, rkey, tc.value, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					r, err := lim.Allow(ctx, "k", tc.limits...)
					if err != nil || !r.Degraded {
						t.Fatalf("decision %d: %+v, %v; want one made under the failure policy", i, r, err)
					}
					for _, d := range []time.Duration{r.RetryAfter, r.ResetAfter, r.Wait} {
						if d < 0 || d > time.Hour {
							t.Fatalf("decision %d: %+v; a duration out of range", i, r)
						}
					}
				}
				if r, err := lim.Allow(ctx, "other", tc.limits...); err != nil || r.Degraded || !r.Allowed {
					t.Errorf("another key: %+v, %v; want admitted by Redis", r, err)
				}
				out := logs.String()
				if n := strings.Count(out, "unexpected script reply"); n != 1 || !strings.Contains(out, rkey) {
					t.Errorf("log = %q; want one line naming %s and the reply", out, rkey)
				}
			})
		}
	}
}

// TestRenewWhileOpen: a holder's renewals reach a
// restarted node while that node's breaker is still open (its probes a
// minute apart here), so its leases are re-asserted within the node's
// grace period rather than when requests' probes have closed the breaker.
func TestRenewWhileOpen(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	lim := newRedisLimiter(t, addr, WithTimeout(100*time.Millisecond),
		WithBreaker(Breaker{Probe: time.Minute}), WithLogger(slog.New(slog.DiscardHandler)))
	t.Cleanup(func() { _ = lim.Close() })
	c, err := lim.PrepareConcurrency(ConcurrencyLimit{Name: "streams", Max: 5, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var held []*Lease
	for range 3 {
		ls, err := c.Acquire(ctx, "stream")
		if err != nil || !ls.Acquired || ls.Degraded {
			t.Fatalf("%+v, %v", ls, err)
		}
		held = append(held, ls)
	}
	srv.Kill()
	// Open the breaker: failed acquisitions, until one is decided locally.
	for deadline := time.Now().Add(5 * time.Second); ; {
		ls, err := c.Acquire(ctx, "stream")
		if err == nil && ls.Degraded {
			_ = ls.Release(ctx)
			if redisOf(lim).WholeOpen() {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the breaker did not open while Redis was down")
		}
	}
	srv.Restart()
	rdb := redistest.NewClient(t, addr)
	var n int64
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n, _ = rdb.ZCard(ctx, held[0].rkey).Result(); n >= 3 {
			break
		}
	}
	if n < 3 {
		t.Fatalf("the restarted node holds %d of the 3 leases; the holder's renewals did not re-assert them", n)
	}
	if !redisOf(lim).WholeOpen() {
		t.Fatal("the breaker closed: the test no longer shows renewals passing an open breaker")
	}
	for _, ls := range held {
		_ = ls.Release(ctx)
	}
}
