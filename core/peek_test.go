package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// TestPeekForetellsAllow: at random moments of random traffic, a Peek
// followed at the same instant by an Allow agrees with it (admitted or
// not, and the remaining count it foretold is one more than the Allow
// leaves), and the Peek changed nothing stored. Run on a real Redis
// (deciding on the test's clock, see newClockLimiter) and in memory, for
// each plan of the differential tests, with a penalty lock on half the
// plans.
func TestPeekForetellsAllow(t *testing.T) {
	for _, backend := range []string{"redis", "memory"} {
		denials := 0
		defer func() {
			if denials == 0 && !t.Failed() {
				t.Errorf("%s: no peek foretold a denial: the traffic did not cover both answers", backend)
			}
		}()
		for pi, limits := range diffPlans {
			t.Run(fmt.Sprintf("%s/plan%d", backend, pi), func(t *testing.T) {
				var opts []Option
				if pi%2 == 1 {
					opts = append(opts, WithPenalty(3*time.Second))
				}
				now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
				var lim *Limiter
				var raw func(key string) string
				var err error
				if backend == "redis" {
					// Its budget is one no loaded machine blows: a degraded
					// decision would not be the one Peek foretold.
					addr := redistest.Addr(t)
					lim = newClockLimiter(t, addr, &now, opts...)
					rdb := redistest.NewClient(t, addr)
					raw = func(key string) string {
						p, _ := lim.plans.get(limits)
						v, err := rdb.Get(context.Background(), redisstore.RedisKey(redisOf(lim).Prefix(), p.FP, key)).Result()
						if err != nil && !errors.Is(err, redis.Nil) {
							t.Fatal(err)
						}
						return v
					}
					step := func(d time.Duration) { now = now.Add(d) }
					denials += runPeekAgreement(t, lim, limits, step, raw)
					return
				}
				lim, err = NewMemory(opts...)
				if err != nil {
					t.Fatal(err)
				}
				lim.now = func() int64 { return now.UnixMicro() }
				raw = func(key string) string {
					p, _ := lim.plans.get(limits)
					d := lim.local.peek(p.ID, key, now.UnixMicro(), p.Ticks)
					return fmt.Sprint(d)
				}
				denials += runPeekAgreement(t, lim, limits, func(d time.Duration) { now = now.Add(d) }, raw)
			})
		}
	}
}

// runPeekAgreement runs the traffic and the checks; it returns how many
// peeks foretold a denial.
func runPeekAgreement(t *testing.T, lim *Limiter, limits []Limit, step func(time.Duration), raw func(string) string) int {
	penalty := lim.penalty > 0
	t.Helper()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(11, uint64(len(limits))))
	p, err := lim.plans.get(limits)
	if err != nil {
		t.Fatal(err)
	}
	checked, denied := 0, 0
	for i := range 1500 {
		// Up to three emission intervals of the first limit between steps,
		// against costs of up to its burst: both answers come up.
		step(time.Duration(r.Int64N(3 * int64(limits[0].Period) / int64(limits[0].Rate))))
		key := fmt.Sprintf("k%d", r.IntN(3))
		if r.IntN(4) > 0 { // traffic
			n := 1 // unit requests drain a bucket to exactly empty
			if r.IntN(2) == 0 {
				n += r.IntN(int(p.minB))
			}
			if _, err := lim.AllowN(ctx, key, n, limits...); err != nil {
				t.Fatal(err)
			}
			continue
		}
		before := raw(key)
		peek, err := lim.Peek(ctx, key, limits...)
		if err != nil {
			t.Fatal(err)
		}
		if after := raw(key); after != before {
			t.Fatalf("step %d: Peek changed the stored state of %s from %q to %q", i, key, before, after)
		}
		got, err := lim.Allow(ctx, key, limits...)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		if !got.Allowed {
			denied++
		}
		// A denial under a penalty locks the key: Peek foretells the
		// denial, and the lock comes with it.
		wantLocked := peek.Locked || (penalty && !peek.Allowed)
		if peek.Allowed != got.Allowed || got.Locked != wantLocked {
			t.Fatalf("step %d, %s: Peek %+v, then Allow %+v at the same instant", i, key, peek, got)
		}
		if got.Allowed && peek.Remaining != got.Remaining+1 {
			t.Fatalf("step %d, %s: Peek said %d remaining, the Allow it foretold left %d", i, key, peek.Remaining, got.Remaining)
		}
		if !got.Allowed && (peek.Remaining != 0 || peek.RetryAfter <= 0) {
			t.Fatalf("step %d, %s: Peek of a denied key: %+v", i, key, peek)
		}
	}
	if checked < 200 || denied == checked {
		t.Fatalf("%d peeks, %d foretold denials: the traffic did not cover admissions", checked, denied)
	}
	return denied
}

// TestPeekWritesNothing: on a real Redis, a Peek of a missing key leaves it
// missing, and a Peek of a held key leaves its value as it was.
func TestPeekWritesNothing(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	lim, err := New(rdb, WithPrefix(fmt.Sprintf("peek%d:", time.Now().UnixNano())), WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limit := PerMinute(10)
	p, _ := lim.plans.get([]Limit{limit})
	rkey := redisstore.RedisKey(redisOf(lim).Prefix(), p.FP, "alice")
	res, err := lim.Peek(ctx, "alice", limit)
	if err != nil || !res.Allowed || res.Remaining != 10 {
		t.Fatalf("Peek of a fresh key = %+v, %v; want allowed with 10 remaining", res, err)
	}
	if n := rdb.Exists(ctx, rkey).Val(); n != 0 {
		t.Fatalf("Peek created the key")
	}
	for range 4 {
		lim.Allow(ctx, "alice", limit)
	}
	before := rdb.Get(ctx, rkey).Val()
	res, err = lim.Peek(ctx, "alice", limit)
	if err != nil || !res.Allowed || res.Remaining != 6 {
		t.Fatalf("Peek after 4 requests = %+v, %v; want allowed with 6 remaining", res, err)
	}
	if after := rdb.Get(ctx, rkey).Val(); after != before {
		t.Fatalf("Peek rewrote the key: %q, then %q", before, after)
	}
	if _, err := lim.Peek(ctx, "", limit); err == nil {
		t.Error("Peek of an empty key: no error")
	}
	if _, err := lim.Peek(ctx, "alice", Limit{Rate: -1}); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("Peek under an invalid limit: %v, want ErrInvalidLimit", err)
	}
}

// TestPeekStoreDown: Peek does not guess; a store that cannot answer is an
// ErrUnavailable, also once the breaker is open.
func TestPeekStoreDown(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	lim, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := lim.Peek(context.Background(), "k", PerSecond(1)); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Peek %d with Redis down: %v, want ErrUnavailable", i, err)
		}
	}
	if !redisOf(lim).WholeOpen() {
		t.Fatal("five failed peeks did not open the breaker")
	}
}
