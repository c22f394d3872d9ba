package core

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// capAfterLoss runs the scenario of a cap across a lost Redis state: limiter
// a holds every slot (cap most, lease 1s) in long requests; forget makes
// Redis lose the state; limiters b and c, which knew the node before, try
// to take slots for the next window. It returns the most slots ever in
// flight (a's held ones plus those b and c took), how many of a's leases
// Redis held again after the window, and a's releases' errors.
type capLoss struct {
	peak      int64 // most in flight at once: a's leases plus newcomers'
	taken     int64 // newcomers' acquisitions while a held every slot
	reheld    int64 // a's leases in Redis after the window
	releaseOK int   // a's releases that returned nil
}

func capAfterLoss(t *testing.T, srv *redistest.Server, most int, window time.Duration, forget func()) capLoss {
	t.Helper()
	addr := srv.Addr()
	prefix := uniquePrefix()
	quiet := WithLogger(slog.New(slog.DiscardHandler))
	mk := func(opts ...Option) *Concurrency {
		lim := newRedisLimiter(t, addr, append([]Option{WithPrefix(prefix), WithTimeout(200 * time.Millisecond), quiet}, opts...)...)
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
		ls, err := a.Acquire(ctx, "stream")
		if err != nil || !ls.Acquired {
			t.Fatalf("a: %+v, %v", ls, err)
		}
		held = append(held, ls)
	}
	// b and c have met the node: their first try is refused at the cap.
	for _, n := range []*Concurrency{b, c} {
		if ls, err := n.Acquire(ctx, "stream"); err != nil || ls.Acquired {
			t.Fatalf("a newcomer before the loss: %+v, %v; want refused", ls, err)
		}
	}
	var newcomers, peak atomic.Int64
	forget()
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
	rdb := redistest.NewClient(t, addr)
	for _, ls := range held {
		if _, err := rdb.ZScore(ctx, ls.rkey, ls.id).Result(); err == nil {
			out.reheld++
		}
	}
	for _, ls := range held {
		if err := ls.Release(ctx); err == nil {
			out.releaseOK++
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
	got := capAfterLoss(t, srv, 10, 1500*time.Millisecond, func() {
		srv.Kill()
		srv.Restart()
	})
	t.Logf("after a restart: %+v", got)
	if got.peak > 10 {
		t.Errorf("in flight reached %d for a cap of 10 (newcomers took %d slots)", got.peak, got.taken)
	}
	if got.reheld != 10 || got.releaseOK != 10 {
		t.Errorf("the holder's leases: %d of 10 held again in Redis, %d released without error; want all", got.reheld, got.releaseOK)
	}
}
