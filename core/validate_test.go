package core

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// TestFallbackNeverRefusesAValidLimit: a limit valid for Redis is never
// refused because its local fallback cannot be counted exactly (its
// per-replica share of a long period overflows, or a WithFallbackLimit
// function returns an invalid limit). The fallback keeps the limit's own
// rate, with the fallback's burst where usable, and the limiter says so
// once per limit. Before, such limits were refused on every request while
// Redis was healthy.
func TestFallbackNeverRefusesAValidLimit(t *testing.T) {
	year := 365 * 24 * time.Hour
	tests := []struct {
		name      string
		opt       Option
		limit     Limit
		wantBurst int // of the fallback's limit
	}{
		{"1000 a year, 300 replicas", WithFallbackReplicas(300), Limit{Rate: 1000, Period: year, Burst: 1000}, 4},
		{"1 per 10 years, 4 replicas", WithFallbackReplicas(4), Limit{Rate: 1, Period: 10 * year, Burst: 1}, 1},
		{"an invalid WithFallbackLimit", WithFallbackLimit(func(g Limit) Limit { return Limit{Rate: 0, Period: g.Period, Burst: 2} }),
			PerMinute(60), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Redis healthy, then gone: the proxy resets every connection.
			proxy := redistest.NewProxy(t, redistest.Addr(t))
			var logs strings.Builder
			lim, err := New(outageClient(t, proxy.Addr()), tt.opt, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
				WithPrefix(uniquePrefix()), WithTimeout(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				res, err := lim.Allow(context.Background(), "k", tt.limit)
				if err != nil {
					t.Fatalf("Allow(%s) = %v: a valid limit was refused", tt.limit, err)
				}
				if res.Degraded {
					t.Fatalf("Allow(%s) was degraded with Redis up", tt.limit)
				}
			}
			if n := strings.Count(logs.String(), "per-replica share cannot be counted exactly"); n != 1 {
				t.Errorf("logged the replaced fallback %d times, want once:\n%s", n, logs.String())
			}
			proxy.SetRefuse(true)
			var res Result
			for range 5 { // open the breaker; then the fallback decides
				res, err = lim.Allow(context.Background(), "fresh", tt.limit)
				if err != nil {
					t.Fatal(err)
				}
			}
			want := Limit{Rate: tt.limit.Rate, Period: tt.limit.Period, Burst: tt.wantBurst}
			if !res.Degraded || res.Limit != want {
				t.Errorf("during the outage: degraded %v, limit %s; want the fallback %s", res.Degraded, res.Limit, want)
			}
		})
	}
}

// TestPenaltyBounds: a penalty above MaxPenalty is refused by New with an
// error that names it; one at the maximum locks with a RetryAfter of about
// that long (it overflowed to a negative RetryAfter past about 228 years).
func TestPenaltyBounds(t *testing.T) {
	rdb := outageClient(t, refusedAddr(t)) // New does no I/O
	if _, err := New(rdb, WithPenalty(MaxPenalty+time.Hour)); err == nil || !strings.Contains(err.Error(), "WithPenalty") {
		t.Fatalf("New(WithPenalty(MaxPenalty+1h)) = %v, want an error naming WithPenalty", err)
	}
	if _, err := New(rdb, WithPenalty(-time.Second)); err == nil {
		t.Fatal("New(WithPenalty(-1s)) succeeded")
	}
	lim := newRedisLimiter(t, redistest.Addr(t), WithPenalty(MaxPenalty), WithDenyCache(false))
	limit := PerHour(1)
	if res, err := lim.Allow(context.Background(), "p", limit); err != nil || !res.Allowed {
		t.Fatalf("first Allow = %+v, %v", res, err)
	}
	res, err := lim.Allow(context.Background(), "p", limit)
	if err != nil || res.Allowed {
		t.Fatalf("second Allow = %+v, %v; want a denial", res, err)
	}
	if res.RetryAfter < MaxPenalty-time.Minute || res.RetryAfter > MaxPenalty {
		t.Errorf("RetryAfter = %v, want about %v", res.RetryAfter, MaxPenalty)
	}
}

// TestResetReleasesEveryReplica: a key locked by a penalty on two replicas
// (B's deny cache holding the denial) is released by Reset on A: A admits
// at once, and B as soon as its cached denial is a second old, though the
// lock had an hour to run.
func TestResetReleasesEveryReplica(t *testing.T) {
	srv := redistest.Start(t)
	prefix := WithPrefix("reset:")
	a := newRedisLimiter(t, srv.Addr(), prefix, WithPenalty(time.Hour))
	b := newRedisLimiter(t, srv.Addr(), prefix, WithPenalty(time.Hour))
	clock := b.now()
	b.now = func() int64 { return clock } // B's local clock, moved by hand
	ctx := context.Background()
	limit := PerMinute(2)
	for range 2 {
		if res, err := a.Allow(ctx, "user:7", limit); err != nil || !res.Allowed {
			t.Fatalf("Allow = %+v, %v", res, err)
		}
	}
	if res, _ := a.Allow(ctx, "user:7", limit); res.Allowed || res.RetryAfter < 59*time.Minute {
		t.Fatalf("third Allow = %+v, want a denial locked for the hour", res)
	}
	for range 3 { // B learns the lock from Redis, then answers from its cache
		if res, _ := b.Allow(ctx, "user:7", limit); res.Allowed {
			t.Fatalf("B admitted a locked key: %+v", res)
		}
	}
	if err := a.Reset(ctx, "user:7", limit); err != nil {
		t.Fatal(err)
	}
	if res, err := a.Allow(ctx, "user:7", limit); err != nil || !res.Allowed {
		t.Fatalf("A after Reset: %+v, %v; want admitted", res, err)
	}
	if res, _ := b.Allow(ctx, "user:7", limit); res.Allowed {
		t.Fatalf("B admitted from a cached denial's first second: %+v (the cache should still answer)", res)
	}
	clock += denyMaxAge
	if res, err := b.Allow(ctx, "user:7", limit); err != nil || !res.Allowed {
		t.Fatalf("B a second after Reset: %+v, %v; want admitted", res, err)
	}
	if err := a.Reset(ctx, "", limit); !errors.Is(err, errEmptyKey) {
		t.Errorf("Reset with an empty key = %v, want %v", err, errEmptyKey)
	}
	mem, _ := NewMemory()
	mem.Allow(ctx, "m", PerHour(1))
	if res, _ := mem.Allow(ctx, "m", PerHour(1)); res.Allowed {
		t.Fatal("memory limiter admitted twice at 1/h")
	}
	if err := mem.Reset(ctx, "m", PerHour(1)); err != nil {
		t.Fatal(err)
	}
	if res, _ := mem.Allow(ctx, "m", PerHour(1)); !res.Allowed {
		t.Error("memory limiter after Reset: denied")
	}
}

// TestResetStoreDown: a Reset that cannot reach Redis says so, wrapping
// ErrUnavailable.
func TestResetStoreDown(t *testing.T) {
	lim, err := New(outageClient(t, redistest.Failing(t, loading)))
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.Reset(context.Background(), "k", PerSecond(1)); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Reset with Redis failing = %v, want ErrUnavailable", err)
	}
}
