package core

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// The lease holder: when SLUICE_LEASE_HOLDER is set, this test binary
// only takes slots and waits to be killed (see TestConcurrencyKilledHolder).
func init() {
	spec := os.Getenv("SLUICE_LEASE_HOLDER")
	if spec == "" {
		return
	}
	os.Exit(holdLeases(spec))
}

// holdLeases takes every slot of one key ("addr prefix key max") with a
// one-second lease, says "held" and blocks until killed.
func holdLeases(spec string) int {
	var addr, prefix, key string
	var most int
	if _, err := fmt.Sscan(spec, &addr, &prefix, &key, &most); err != nil {
		fmt.Println("bad spec:", err)
		return 2
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	lim, err := New(rdb, WithPrefix(prefix), WithTimeout(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: most, Lease: time.Second})
	if err != nil {
		fmt.Println(err)
		return 2
	}
	for range most {
		ls, err := c.Acquire(context.Background(), key)
		if err != nil || !ls.Acquired {
			fmt.Println("not acquired:", err)
			return 2
		}
	}
	fmt.Println("held")
	select {}
}

// concurrencyBackends are the stores the cap is checked on.
func concurrencyBackends(t *testing.T) map[string]func(t *testing.T, opts ...Option) *Limiter {
	addr := redistest.Addr(t)
	prefix := uniquePrefix()
	return map[string]func(*testing.T, ...Option) *Limiter{
		"redis": func(t *testing.T, opts ...Option) *Limiter {
			lim := newRedisLimiter(t, addr, append([]Option{WithPrefix(prefix + t.Name() + ":")}, opts...)...)
			t.Cleanup(func() { _ = lim.Close() })
			return lim
		},
		"memory": func(t *testing.T, opts ...Option) *Limiter {
			lim, err := NewMemory(opts...)
			if err != nil {
				t.Fatal(err)
			}
			return lim
		},
	}
}

// TestConcurrencyCap: Max slots are taken, the next is refused, a release
// frees one, and releasing twice changes nothing.
func TestConcurrencyCap(t *testing.T) {
	for name, newLimiter := range concurrencyBackends(t) {
		t.Run(name, func(t *testing.T) {
			c, err := newLimiter(t).PrepareConcurrency(ConcurrencyLimit{Name: "uploads", Max: 2})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			acquire := func(want bool, held int) *Lease {
				t.Helper()
				ls, err := c.Acquire(ctx, "tenant-a")
				if err != nil {
					t.Fatal(err)
				}
				if ls.Acquired != want || ls.InFlight != held || ls.Degraded {
					t.Fatalf("Acquire = %+v; want acquired %v with %d in flight", ls, want, held)
				}
				return ls
			}
			a := acquire(true, 1)
			acquire(true, 2)
			refused := acquire(false, 2)
			if err := refused.Release(ctx); err != nil {
				t.Errorf("releasing a refused lease: %v", err)
			}
			if other, err := c.Acquire(ctx, "tenant-b"); err != nil || !other.Acquired {
				t.Errorf("another key: %+v, %v; want its own slots", other, err)
			}
			for range 2 {
				if err := a.Release(ctx); err != nil {
					t.Fatalf("Release: %v", err)
				}
			}
			acquire(true, 2)
			acquire(false, 2)
		})
	}
}

// TestConcurrencyAcrossInstances: four limiter instances, each with its
// own client, eight goroutines each, on one key with a cap of three: the
// handlers themselves never count more than three in flight.
func TestConcurrencyAcrossInstances(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := uniquePrefix()
	const most, instances, workers, rounds = 3, 4, 8, 40
	var inflight, peak, acquired, refused atomic.Int64
	var wg sync.WaitGroup
	for range instances {
		lim := newRedisLimiter(t, addr, WithPrefix(prefix))
		t.Cleanup(func() { _ = lim.Close() })
		c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: most})
		if err != nil {
			t.Fatal(err)
		}
		for range workers {
			wg.Go(func() {
				for range rounds {
					ls, err := c.Acquire(context.Background(), "hot")
					if err != nil {
						t.Error(err)
						return
					}
					if !ls.Acquired {
						refused.Add(1)
						continue
					}
					acquired.Add(1)
					n := inflight.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(200 * time.Microsecond) // the request's work
					inflight.Add(-1)
					if err := ls.Release(context.Background()); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d acquired, %d refused, at most %d in flight", acquired.Load(), refused.Load(), peak.Load())
	if peak.Load() > most {
		t.Errorf("%d requests in flight at once, cap %d", peak.Load(), most)
	}
	if acquired.Load() == 0 || refused.Load() == 0 {
		t.Errorf("%d acquired, %d refused: the test did not contend", acquired.Load(), refused.Load())
	}
}

// TestConcurrencyLeaseRenewed: a slot held for four times its lease is
// never lost while its holder lives, and is free once released.
func TestConcurrencyLeaseRenewed(t *testing.T) {
	t.Parallel() // waits on Redis and timers more than it computes
	lim := newRedisLimiter(t, redistest.Addr(t))
	t.Cleanup(func() { _ = lim.Close() })
	const lease = 1500 * time.Millisecond
	c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 1, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held, err := c.Acquire(ctx, "slow")
	if err != nil || !held.Acquired {
		t.Fatalf("Acquire: %+v, %v", held, err)
	}
	for end := time.Now().Add(4 * lease); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		other, err := c.Acquire(ctx, "slow")
		if err != nil {
			t.Fatal(err)
		}
		if other.Acquired {
			t.Fatal("a second request took the slot of a live one: its lease was not renewed")
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release after %v: %v", 4*lease, err)
	}
	if next, err := c.Acquire(ctx, "slow"); err != nil || !next.Acquired {
		t.Errorf("after the release: %+v, %v; want the slot", next, err)
	}
}

// TestConcurrencyKilledHolder: the slots of a process killed with SIGKILL
// are free again within their lease (one second), and not before it ends.
func TestConcurrencyKilledHolder(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := uniquePrefix()
	const most = 2
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("SLUICE_LEASE_HOLDER=%s %s %s %d", addr, prefix, "victim", most))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "held" {
		t.Fatalf("the holder said %q (%v)", line, err)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()

	lim := newRedisLimiter(t, addr, WithPrefix(prefix))
	t.Cleanup(func() { _ = lim.Close() })
	c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: most, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := c.Acquire(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if first.Acquired && time.Since(killed) < 500*time.Millisecond {
		t.Fatal("a slot of the killed holder was free at once: it held nothing")
	}
	for !first.Acquired {
		if time.Since(killed) > 5*time.Second {
			t.Fatalf("the killed holder's slots still taken %v after SIGKILL (lease 1s)", time.Since(killed))
		}
		time.Sleep(20 * time.Millisecond)
		if first, err = c.Acquire(ctx, "victim"); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(killed)
	t.Logf("a slot was free %v after SIGKILL (lease 1s)", took.Round(time.Millisecond))
	if took > 1500*time.Millisecond {
		t.Logf("slower than the lease plus 500ms: the machine is loaded")
	}
}

// TestConcurrencyDegraded: with the store unreachable, a cap follows the
// failure policy: FallbackLocal holds a replica's share, FailOpen takes
// every slot unchecked, FailClosed refuses with ErrUnavailable.
func TestConcurrencyDegraded(t *testing.T) {
	addr := refusedAddr(t)
	limiter := func(t *testing.T, opts ...Option) *Concurrency {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		lim, err := New(rdb, append([]Option{WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lim.Close() })
		c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 4})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx := context.Background()
	t.Run("fallback local", func(t *testing.T) {
		c := limiter(t, WithFallbackReplicas(2))
		var got []bool
		var first *Lease
		for range 3 {
			ls, err := c.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = ls
			}
			if !ls.Degraded {
				t.Errorf("%+v: not marked degraded", ls)
			}
			got = append(got, ls.Acquired)
		}
		if fmt.Sprint(got) != "[true true false]" {
			t.Errorf("acquired %v; want a replica's share of 4 among 2 replicas", got)
		}
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if ls, err := c.Acquire(ctx, "k"); err != nil || !ls.Acquired {
			t.Errorf("after a local release: %+v, %v", ls, err)
		}
	})
	t.Run("fail open", func(t *testing.T) {
		c := limiter(t, WithFailurePolicy(FailOpen))
		for range 6 {
			ls, err := c.Acquire(ctx, "k")
			if err != nil || !ls.Acquired || !ls.Degraded {
				t.Fatalf("%+v, %v; want every slot, degraded", ls, err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("fail closed", func(t *testing.T) {
		c := limiter(t, WithFailurePolicy(FailClosed))
		if _, err := c.Acquire(ctx, "k"); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Acquire = %v, want ErrUnavailable", err)
		}
	})
}

// TestAcquireLostAnswerGivesSlotBack: with Redis 100 ms away and a 50 ms
// budget, both sends of an acquisition outlive the budget and the caller
// is decided by the fallback, yet Redis ran the script and holds the
// slot. The lease keeper gives it back in its next rounds (which have a
// second), so the cap is whole again long before the lease (10 s) would
// have freed it.
func TestAcquireLostAnswerGivesSlotBack(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	lim, err := New(outageClient(t, proxy.Addr()), WithTimeout(50*time.Millisecond), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	ctx := context.Background()
	if err := lim.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 2, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rkey := redisOf(lim).RKey(c.fp, "k")
	direct := redistest.NewClient(t, srv.Addr())
	held := func() int64 {
		n, err := direct.ZCard(ctx, rkey).Result()
		if err != nil {
			t.Error(err)
		}
		return n
	}
	// The slot is held from the first send's script (during Acquire) until
	// the keeper's release (a round, over 100 ms, after Acquire returned):
	// a watcher started first sees it.
	var sawHeld atomic.Bool
	stop := make(chan struct{})
	watched := make(chan struct{})
	defer func() {
		close(stop)
		<-watched
	}()
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if held() > 0 {
				sawHeld.Store(true)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	proxy.SetDelay(100 * time.Millisecond)
	ls, err := c.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !ls.Degraded {
		t.Fatalf("Acquire with Redis 100 ms away = %+v; want a degraded lease (the premise)", ls)
	}
	returned := time.Now()
	deadline := returned.Add(3 * time.Second)
	defer func() {
		t.Logf("the slot was given back %v after Acquire returned", time.Since(returned).Round(time.Millisecond))
	}()
	for n := held(); n != 0 || !sawHeld.Load(); n = held() {
		if time.Now().After(deadline) {
			t.Fatalf("Redis holds %d slots of the lost acquisition 3 s after it (seen held: %v); want it given back long before its 10 s lease", n, sawHeld.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrencyLeaseLost: a release of a slot that expired in Redis
// (here: deleted) says so.
func TestConcurrencyLeaseLost(t *testing.T) {
	addr := redistest.Addr(t)
	lim := newRedisLimiter(t, addr)
	t.Cleanup(func() { _ = lim.Close() })
	c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ls, err := c.Acquire(ctx, "k")
	if err != nil || !ls.Acquired {
		t.Fatalf("%+v, %v", ls, err)
	}
	if err := redisstore.ResetScript.Run(ctx, redistest.NewClient(t, addr), []string{ls.rkey}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Release of an expired slot = %v, want ErrLeaseLost", err)
	}
}

func TestConcurrencyLimitValidation(t *testing.T) {
	lim, err := NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []ConcurrencyLimit{{Max: 0}, {Max: 2_000_000}, {Max: 1, Lease: time.Millisecond}, {Max: 1, Lease: time.Hour}} {
		if _, err := lim.PrepareConcurrency(c); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("PrepareConcurrency(%+v) = %v, want ErrInvalidLimit", c, err)
		}
	}
	c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(context.Background(), ""); err == nil {
		t.Error("Acquire with an empty key: no error")
	}
}

// BenchmarkConcurrencyAcquireRelease: one slot taken and given back, two
// script calls on a real Redis, from parallel callers on distinct keys.
func BenchmarkConcurrencyAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 64})
	b.Cleanup(func() { _ = rdb.Close() })
	lim, err := New(rdb, WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lim.Close() })
	c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 8})
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("k%d", n.Add(1))
		ctx := context.Background()
		for pb.Next() {
			ls, err := c.Acquire(ctx, key)
			if err != nil || !ls.Acquired {
				b.Fatalf("%+v, %v", ls, err)
			}
			if err := ls.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestConcurrencyMatchesMemory drives random acquisitions and releases on
// two keys through one engine over both stores, a real Redis and memory,
// and requires the same answer from each at every step.
func TestConcurrencyMatchesMemory(t *testing.T) {
	backends := concurrencyBackends(t)
	ctx := context.Background()
	var caps [2]*Concurrency
	for i, name := range []string{"redis", "memory"} {
		c, err := backends[name](t).PrepareConcurrency(ConcurrencyLimit{Name: "jobs", Max: 3, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		caps[i] = c
	}
	r := rand.New(rand.NewPCG(5, 6))
	var held [][2]*Lease
	var refused, released int
	for i := range 400 {
		if r.IntN(2) == 0 && len(held) > 0 {
			j := r.IntN(len(held))
			h := held[j]
			held = append(held[:j], held[j+1:]...)
			for s, ls := range h {
				if err := ls.Release(ctx); err != nil {
					t.Fatalf("step %d: store %d: Release: %v", i, s, err)
				}
			}
			released++
			continue
		}
		key := []string{"a", "b"}[r.IntN(2)]
		var ls [2]*Lease
		for s, c := range caps {
			var err error
			if ls[s], err = c.Acquire(ctx, key); err != nil {
				t.Fatalf("step %d: store %d: Acquire: %v", i, s, err)
			}
		}
		g, w := ls[0], ls[1]
		if g.Acquired != w.Acquired || g.InFlight != w.InFlight || g.Degraded || w.Degraded {
			t.Fatalf("step %d: Acquire(%q): redis %+v, memory %+v", i, key, g, w)
		}
		if g.Acquired {
			held = append(held, ls)
		} else {
			refused++
		}
	}
	if refused == 0 || released == 0 {
		t.Fatalf("%d refused, %d released: the sequence does not reach the cap", refused, released)
	}
	t.Logf("400 steps identical: %d acquisitions refused, %d released", refused, released)
}
