package compat

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"go.uber.org/goleak"
)

// TestCloseLeavesNoGoroutine runs a limiter through everything that starts
// goroutines (batched round trips from many callers, the fleet heartbeat,
// an outage with its breaker probes and fallback, recovery) and requires
// that none of them outlives Close.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	srv := redistest.Start(t)
	before := goleak.IgnoreCurrent()
	proxy, err := redistest.ListenProxy(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	lim, err := core.New(rdb,
		core.WithFleet(core.Fleet{Name: "leaks", Heartbeat: 100 * time.Millisecond}),
		core.WithTimeout(200*time.Millisecond),
		core.WithLogger(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		t.Fatal(err)
	}
	rule, err := lim.Prepare(core.PerSecond(1000))
	if err != nil {
		t.Fatal(err)
	}
	burst := func() {
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Go(func() {
				for range 20 {
					if _, err := rule.Allow(context.Background(), string(rune('a'+i%8))); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	burst()
	if err := proxy.SetDown(true); err != nil {
		t.Fatal(err)
	}
	burst() // decided by the fallback while the breaker probes
	if err := proxy.SetDown(false); err != nil {
		t.Fatal(err)
	}
	// go-redis answers with its last dial error until its own redial
	// (every second) succeeds; wait for decisions to come from Redis again.
	for deadline := time.Now().Add(20 * time.Second); ; {
		res, err := rule.Allow(context.Background(), "probe")
		if err != nil {
			t.Fatal(err)
		}
		if !res.Degraded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("decisions still degraded 20s after the outage ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	burst()

	if err := lim.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	_ = rdb.Close()
	_ = proxy.Close()
	// go-redis redials a failed pool from a goroutine of its own that
	// sees the pool closed within a second; it is the client's, not ours.
	goleak.VerifyNone(t, before,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
