package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/redistest"
)

// TestPeekManyMatchesPeek: after random traffic (with penalty locks) on
// 60 of 100 keys, under each plan of the differential tests, PeekMany of
// the 100 keys reports exactly what Peek reports of each at the same
// instant: on a real Redis (deciding on the test's clock, see
// newClockLimiter) and in memory.
func TestPeekManyMatchesPeek(t *testing.T) {
	addr := redistest.Addr(t)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	for _, backend := range []string{"redis", "memory"} {
		denied := 0
		for pi, limits := range diffPlans {
			t.Run(fmt.Sprintf("%s/plan%d", backend, pi), func(t *testing.T) {
				now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
				var lim *Limiter
				if backend == "redis" {
					lim = newClockLimiter(t, addr, &now, WithPenalty(time.Second))
				} else {
					var err error
					if lim, err = NewMemory(WithPenalty(time.Second)); err != nil {
						t.Fatal(err)
					}
					lim.now = func() int64 { return now.UnixMicro() }
				}
				rule, err := lim.Prepare(limits...)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				r := rand.New(rand.NewPCG(uint64(pi), 50))
				for round := range 4 {
					for range 300 {
						k := keys[r.IntN(60)]
						if r.IntN(2) == 0 {
							k = keys[r.IntN(6)] // hot keys, denied often
						}
						if _, err := rule.Allow(ctx, k); err != nil {
							t.Fatal(err)
						}
						if r.IntN(20) == 0 {
							now = now.Add(time.Duration(r.IntN(100)) * time.Millisecond)
						}
					}
					got, err := rule.PeekMany(ctx, keys)
					if err != nil || len(got) != len(keys) {
						t.Fatalf("round %d: PeekMany = %d results, %v; want %d", round, len(got), err, len(keys))
					}
					for i, k := range keys {
						want, err := rule.Peek(ctx, k)
						if err != nil {
							t.Fatal(err)
						}
						if got[i] != want {
							t.Fatalf("round %d: PeekMany(%s) = %+v, Peek = %+v", round, k, got[i], want)
						}
						if !want.Allowed {
							denied++
						}
					}
				}
			})
		}
		if denied == 0 {
			t.Errorf("%s: no key was found denied: the traffic did not cover both answers", backend)
		}
	}
}

// TestPeekManyOneCall: on a server of its own, PeekMany of 100 keys (50
// of them held) is one EVALSHA that runs TIME once and GET per key, and
// writes nothing, as INFO commandstats counts it.
func TestPeekManyOneCall(t *testing.T) {
	srv := redistest.Start(t)
	lim := newRedisLimiter(t, srv.Addr())
	rdb := redistest.NewClient(t, srv.Addr())
	ctx := context.Background()
	for _, limits := range [][]Limit{{PerMinute(10)}, {PerSecond(5), PerCalendarMonth(1000, "UTC")}} {
		rule, err := lim.Prepare(limits...)
		if err != nil {
			t.Fatal(err)
		}
		keys := make([]string, 100)
		for i := range keys {
			keys[i] = fmt.Sprintf("tenant:%d", i)
			if i%2 == 0 {
				if res, err := rule.AllowN(ctx, keys[i], 3); err != nil || !res.Allowed {
					t.Fatalf("AllowN(%s) = %+v, %v", keys[i], res, err)
				}
			}
		}
		if _, err := rule.PeekMany(ctx, keys[:1]); err != nil { // the script is loaded
			t.Fatal(err)
		}
		size := rdb.DBSize(ctx).Val()
		before, err := redistest.CommandCalls(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		res, err := rule.PeekMany(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		after, err := redistest.CommandCalls(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{"evalsha": 1, "eval": 0, "time": 1, "get": 100, "set": 0, "del": 0, "pexpire": 0}
		for cmd, n := range want {
			if d := after[cmd] - before[cmd]; d != n {
				t.Errorf("%v: PeekMany of 100 keys ran %s %d times, want %d", limits, cmd, d, n)
			}
		}
		if n := rdb.DBSize(ctx).Val(); n != size {
			t.Errorf("%v: PeekMany changed the number of keys from %d to %d", limits, size, n)
		}
		burst := limits[0].Burst
		for i, r := range res {
			if wantLeft := burst - 3*(1-i%2); r.Remaining != wantLeft || !r.Allowed {
				t.Fatalf("%v: PeekMany result %d = %+v, want allowed with %d remaining", limits, i, r, wantLeft)
			}
		}
	}
	if _, err := lim.PeekMany(ctx, []string{"a", ""}, PerSecond(1)); err == nil {
		t.Error("PeekMany with an empty key: no error")
	}
	if _, err := lim.PeekMany(ctx, make([]string, MaxPeekKeys+1), PerSecond(1)); err == nil {
		t.Error("PeekMany of too many keys: no error")
	}
	if res, err := lim.PeekMany(ctx, nil, PerSecond(1)); err != nil || len(res) != 0 {
		t.Errorf("PeekMany of no key = %v, %v; want none, nil", res, err)
	}
}

// TestPathPeekResetMonthly: a path whose organisation level has a
// calendar month's quota, on a real Redis and in memory: Peek reports
// every level's remaining, Reset of the organisation alone empties its
// bucket and leaves the team's, and Reset of the team's path empties both.
func TestPathPeekResetMonthly(t *testing.T) {
	addr := redistest.Addr(t)
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) {
			lim := limiterOn(t, backend, addr)
			pr, err := lim.PreparePath("api",
				Level{Name: "org", Limits: []Limit{PerCalendarMonth(1000, "UTC")}},
				Level{Name: "team", Limits: []Limit{PerMinute(6).WithBurst(5)}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i, p := range [][]string{{"acme", "eng"}, {"acme", "eng"}, {"acme", "eng"}, {"acme", "ops"}, {"acme"}} {
				if res, err := pr.Allow(ctx, p...); err != nil || !res.Allowed {
					t.Fatalf("Allow %d (%v) = %+v, %v", i, p, res, err)
				}
			}
			check := func(what string, path []string, want ...int) {
				t.Helper()
				res, err := pr.Peek(ctx, path...)
				if err != nil {
					t.Fatalf("%s: Peek(%v): %v", what, path, err)
				}
				if len(res) != len(want) {
					t.Fatalf("%s: Peek(%v) = %d results, want %d", what, path, len(res), len(want))
				}
				for i, r := range res {
					if r.Level != pr.names[i] || r.Remaining != want[i] || !r.Allowed {
						t.Errorf("%s: Peek(%v)[%d] = %+v, want level %s allowed with %d remaining", what, path, i, r, pr.names[i], want[i])
					}
				}
			}
			check("after traffic", []string{"acme", "eng"}, 995, 2)
			check("after traffic", []string{"acme", "ops"}, 995, 4)
			check("after traffic", []string{"acme"}, 995)
			check("another org", []string{"globex", "eng"}, 1000, 5)
			if err := pr.Reset(ctx, "acme"); err != nil {
				t.Fatal(err)
			}
			check("org reset", []string{"acme", "eng"}, 1000, 2)
			if err := pr.Reset(ctx, "acme", "eng"); err != nil {
				t.Fatal(err)
			}
			check("team reset", []string{"acme", "eng"}, 1000, 5)
			check("team reset", []string{"acme", "ops"}, 1000, 4)
			for _, bad := range [][]string{nil, {"a", "b", "c"}, {"a", ""}} {
				if _, err := pr.Peek(ctx, bad...); err == nil {
					t.Errorf("Peek(%q): no error", bad)
				}
				if err := pr.Reset(ctx, bad...); err == nil {
					t.Errorf("Reset(%q): no error", bad)
				}
			}
		})
	}
}

// TestInFlight: a cap's in-flight count follows acquisitions and
// releases, on a real Redis and in memory; in Redis it does not count a
// lease that expired or the grace marker, and writes nothing.
func TestInFlight(t *testing.T) {
	addr := redistest.Addr(t)
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) {
			lim := limiterOn(t, backend, addr)
			defer lim.Close()
			c, err := lim.PrepareConcurrency(ConcurrencyLimit{Name: "jobs", Max: 5})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			count := func(key string, want int) {
				t.Helper()
				if n, err := c.InFlight(ctx, key); n != want || err != nil {
					t.Fatalf("InFlight(%s) = %d, %v; want %d", key, n, err, want)
				}
			}
			count("k", 0)
			var held []*Lease
			for range 3 {
				ls, err := c.Acquire(ctx, "k")
				if err != nil || !ls.Acquired {
					t.Fatalf("Acquire = %+v, %v", ls, err)
				}
				held = append(held, ls)
			}
			count("k", 3)
			count("other", 0)
			if err := held[0].Release(ctx); err != nil {
				t.Fatal(err)
			}
			count("k", 2)
			if _, err := c.InFlight(ctx, ""); err == nil {
				t.Error("InFlight of an empty key: no error")
			}
			if backend != "redis" {
				return
			}
			rdb := redistest.NewClient(t, addr)
			rkey := redisOf(lim).RKey(c.fp, "k")
			ms := time.Now().UnixMilli()
			rdb.ZAdd(ctx, rkey, redis.Z{Score: float64(ms - 60_000), Member: "expired"}, redis.Z{Score: float64(ms + 60_000), Member: "~grace"})
			count("k", 2)
			if n := rdb.ZCard(ctx, rkey).Val(); n != 4 {
				t.Errorf("the lease set holds %d members after InFlight, want 4: it wrote", n)
			}
			rdb.Set(ctx, redisOf(lim).RKey(c.fp, "str"), "x", 0)
			if _, err := c.InFlight(ctx, "str"); !errors.Is(err, ErrUnavailable) {
				t.Errorf("InFlight of a key of another type: %v, want ErrUnavailable", err)
			}
		})
	}
}

// TestUsageReadsStoreDown: the usage reads do not guess; a store that
// cannot answer is an ErrUnavailable.
func TestUsageReadsStoreDown(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	lim, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	pr, err := lim.PreparePath("", Level{Name: "org", Limits: []Limit{PerCalendarMonth(10, "UTC")}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 5 {
		if res, err := lim.PeekMany(ctx, []string{"a", "b"}, PerSecond(1)); !errors.Is(err, ErrUnavailable) || res != nil {
			t.Errorf("PeekMany %d with Redis down = %v, %v; want ErrUnavailable", i, res, err)
		}
		if res, err := pr.Peek(ctx, "acme"); !errors.Is(err, ErrUnavailable) || res != nil {
			t.Errorf("PathRule.Peek %d with Redis down = %v, %v; want ErrUnavailable", i, res, err)
		}
		if err := pr.Reset(ctx, "acme"); !errors.Is(err, ErrUnavailable) {
			t.Errorf("PathRule.Reset %d with Redis down: %v, want ErrUnavailable", i, err)
		}
		if _, err := c.InFlight(ctx, "k"); !errors.Is(err, ErrUnavailable) {
			t.Errorf("InFlight %d with Redis down: %v, want ErrUnavailable", i, err)
		}
	}
}

// limiterOn returns a limiter on backend: "redis", a real Redis at addr,
// or "memory", NewMemory.
func limiterOn(t *testing.T, backend, addr string) *Limiter {
	t.Helper()
	if backend == "redis" {
		return newRedisLimiter(t, addr)
	}
	lim, err := NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	return lim
}
