package core

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/redistest"
)

// decisionLog is an Observer that keeps every Result it is told of.
type decisionLog struct {
	mu      sync.Mutex
	results []Result
}

func (d *decisionLog) ObserveDecision(res Result, _ Source) {
	d.mu.Lock()
	d.results = append(d.results, res)
	d.mu.Unlock()
}

func (*decisionLog) ObserveStore(StoreCall)       {}
func (*decisionLog) ObserveDegraded(StoreOutage)  {}
func (*decisionLog) ObserveRecovered(StoreOutage) {}

// seen returns the Results observed so far.
func (d *decisionLog) seen() []Result {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Result(nil), d.results...)
}

// TestWaitReported: a reservation's Result says how long it waits for its
// tokens, through Limiter.Wait and Rule.Wait, on a real Redis (deciding on
// the test's clock, see newClockLimiter), in memory, and in the local
// fallback while Redis refuses connections; an immediate
// admission and a denial say zero, and the Observer is told the same
// Result as the caller. The clock stands still but Wait's sleep is real:
// the reserved steps sleep 50 and 75 ms.
func TestWaitReported(t *testing.T) {
	limit := PerSecond(20).WithBurst(1) // one token every 50 ms
	const ms = time.Millisecond
	type step struct {
		name     string
		advance  time.Duration // the clock moves first
		call     func(ctx context.Context, lim *Limiter, rule *Rule) (Result, error)
		deadline time.Duration // the call's context deadline; 0 for none
		allowed  bool
		wait     time.Duration
	}
	limWait := func(ctx context.Context, lim *Limiter, _ *Rule) (Result, error) {
		return lim.Wait(ctx, "k", 1, limit)
	}
	steps := []step{
		{name: "a full bucket admits at once", call: limWait, allowed: true, wait: 0},
		{name: "Rule.Wait reserves the next token", call: func(ctx context.Context, _ *Limiter, rule *Rule) (Result, error) {
			return rule.Wait(ctx, "k", 1)
		}, allowed: true, wait: 50 * ms},
		{name: "AllowN is denied, and waits for nothing", call: func(ctx context.Context, lim *Limiter, _ *Rule) (Result, error) {
			return lim.AllowN(ctx, "k", 1, limit)
		}, allowed: false, wait: 0},
		// The deadline, within 90 ms, comes before the token, due in 100.
		{name: "a reservation beyond the deadline is denied", call: limWait, deadline: 90 * ms, allowed: false, wait: 0},
		{name: "Limiter.Wait reserves, 25 ms later", advance: 25 * ms, call: limWait, allowed: true, wait: 75 * ms},
	}
	for _, backend := range []string{"redis", "memory", "fallback"} {
		t.Run(backend, func(t *testing.T) {
			now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
			log := &decisionLog{}
			var lim *Limiter
			var err error
			switch backend {
			case "redis":
				lim = newClockLimiter(t, redistest.Addr(t), &now, WithObserver(log))
			case "memory":
				lim, err = NewMemory(WithClock(func() time.Time { return now }), WithObserver(log))
			case "fallback":
				rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
				t.Cleanup(func() { _ = rdb.Close() })
				lim, err = New(rdb, WithObserver(log), WithLogger(slog.New(slog.DiscardHandler)), WithFallbackReplicas(1))
				if lim != nil {
					lim.now = func() int64 { return now.UnixMicro() }
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lim.Close() })
			rule, err := lim.Prepare(limit)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range steps {
				now = now.Add(s.advance)
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if s.deadline > 0 {
					ctx, cancel = context.WithTimeout(ctx, s.deadline)
				}
				res, err := s.call(ctx, lim, rule)
				cancel()
				if err != nil {
					t.Fatalf("step %d (%s): error %v", i, s.name, err)
				}
				if res.Allowed != s.allowed || res.Wait != s.wait || res.Degraded != (backend == "fallback") {
					t.Errorf("step %d (%s): Allowed %v, Wait %v; want %v, %v (%+v)", i, s.name, res.Allowed, res.Wait, s.allowed, s.wait, res)
				}
				seen := log.seen()
				if len(seen) != i+1 {
					t.Fatalf("step %d (%s): %d decisions observed, want %d", i, s.name, len(seen), i+1)
				}
				if got := seen[i]; got != res {
					t.Errorf("step %d (%s): observed %+v, want the Result returned, %+v", i, s.name, got, res)
				}
			}
		})
	}
}
