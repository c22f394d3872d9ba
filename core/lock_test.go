package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// lockEnv is a store Rule.Lock is tested on: two replicas of one service
// (the same store), and a way to let time pass.
type lockEnv struct {
	a, b *Limiter
	pass func(time.Duration) // moves the clock, or waits for real time
}

// TestRuleLock locks keys on a real Redis and in memory: every replica
// is denied, locked, until the lock ends; a lock is never shortened; the
// key's tokens are what they were; Reset lifts the lock.
func TestRuleLock(t *testing.T) {
	envs := map[string]func(t *testing.T) lockEnv{
		"memory": func(t *testing.T) lockEnv {
			now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
			lim, err := NewMemory(WithClock(func() time.Time { return now }))
			if err != nil {
				t.Fatal(err)
			}
			return lockEnv{a: lim, b: lim, pass: func(d time.Duration) { now = now.Add(d) }}
		},
		"redis": func(t *testing.T) lockEnv {
			addr := redistest.Addr(t)
			prefix := WithPrefix(uniquePrefix())
			a := newRedisLimiter(t, addr, prefix)
			b := newRedisLimiter(t, addr, prefix)
			return lockEnv{a: a, b: b, pass: func(d time.Duration) { time.Sleep(d) }} // a lock's end on Redis's clock
		},
	}
	for name, mk := range envs {
		t.Run(name, func(t *testing.T) {
			env := mk(t)
			ctx := context.Background()
			limit := Limit{Rate: 1, Period: time.Hour, Burst: 5} // no refill within the test
			ra, err := env.a.Prepare(limit)
			if err != nil {
				t.Fatal(err)
			}
			rb, err := env.b.Prepare(limit)
			if err != nil {
				t.Fatal(err)
			}
			// A fresh key, locked for 30 s: every replica is denied.
			if got, err := ra.Lock(ctx, "up", 30*time.Second); err != nil || got != 30*time.Second {
				t.Fatalf("Lock(up, 30s) = %v, %v, want 30s", got, err)
			}
			for i, r := range []*Rule{ra, rb} {
				res, err := r.Allow(ctx, "up")
				if err != nil || res.Allowed || !res.Locked || res.RetryAfter <= 29*time.Second || res.RetryAfter > 30*time.Second {
					t.Errorf("replica %d: Allow(up) = %+v, %v; want locked for about 30 s", i, res, err)
				}
			}
			// A shorter lock leaves the longer one.
			if got, err := rb.Lock(ctx, "up", 10*time.Second); err != nil || got <= 29*time.Second {
				t.Errorf("Lock(up, 10s) over a 30 s lock = %v, %v; want the 30 s lock's time left", got, err)
			}
			// Reset lifts it (here at once; another replica's deny cache
			// may answer for the lock up to a second longer, see Reset).
			if err := ra.Reset(ctx, "up"); err != nil {
				t.Fatal(err)
			}
			if res, err := ra.Allow(ctx, "up"); err != nil || !res.Allowed {
				t.Errorf("after Reset: Allow(up) = %+v, %v; want admitted", res, err)
			}

			// A used bucket keeps its tokens through a lock.
			for range 2 {
				if res, err := ra.Allow(ctx, "used"); err != nil || !res.Allowed {
					t.Fatalf("Allow(used) = %+v, %v", res, err)
				}
			}
			if _, err := ra.Lock(ctx, "used", 50*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if res, _ := rb.Allow(ctx, "used"); res.Allowed {
				t.Errorf("Allow(used) under the lock admitted")
			}
			env.pass(60 * time.Millisecond)
			res, err := rb.Allow(ctx, "used")
			for deadline := time.Now().Add(5 * time.Second); err == nil && !res.Allowed && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond) // the deny cache may answer for the lock a little longer
				res, err = rb.Allow(ctx, "used")
			}
			if err != nil || !res.Allowed || res.Remaining != 2 {
				t.Errorf("after the lock: Allow(used) = %+v, %v; want admitted with 2 left (5 less 3)", res, err)
			}
		})
	}
}

// TestRuleLockErrors: bad input is an error naming it, never a lock.
func TestRuleLockErrors(t *testing.T) {
	lim, err := NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	r, err := lim.Prepare(PerSecond(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		key  string
		d    time.Duration
	}{
		{"empty key", "", time.Second},
		{"zero", "k", 0},
		{"negative", "k", -time.Second},
		{"above MaxPenalty", "k", MaxPenalty + time.Second},
	} {
		if _, err := r.Lock(ctx, c.key, c.d); err == nil {
			t.Errorf("%s: Lock(%q, %v) = nil error", c.name, c.key, c.d)
		}
	}
	if res, err := r.Allow(ctx, "k"); err != nil || !res.Allowed {
		t.Errorf("after refused locks: Allow = %+v, %v; want admitted", res, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Lock(cctx, "k", time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with a cancelled context = %v, want context.Canceled", err)
	}
}

// TestRuleLockStopsLeases: a replica holding a hand of leased tokens for
// a hot key spends none of it once it locked the key.
func TestRuleLockStopsLeases(t *testing.T) {
	obs := &leaseCounter{}
	lim := newRedisLimiter(t, redistest.Addr(t), WithObserver(obs))
	defer lim.Close()
	base, err := lim.Prepare(Limit{Rate: 100000, Period: time.Second, Burst: 100000})
	if err != nil {
		t.Fatal(err)
	}
	rule, err := base.WithTokenLeases(LeaseBound{Fraction: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 5000 { // hot: leases take over
		if _, err := rule.Allow(ctx, "hot"); err != nil {
			t.Fatal(err)
		}
	}
	if obs.bySrc[SourceLease].Load() == 0 {
		t.Fatal("no decision from a lease: the key never turned hot")
	}
	if _, err := rule.Lock(ctx, "hot", time.Minute); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if res, err := rule.Allow(ctx, "hot"); err != nil || res.Allowed {
			t.Fatalf("decision %d after the lock: %+v, %v; want denied", i, res, err)
		}
	}
}
