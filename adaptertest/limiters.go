package adaptertest

import (
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// FrozenTime is the instant at which [FrozenRedis] stops the clock.
var FrozenTime = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

// Memory returns a limiter that keeps its buckets in process memory. It
// calls tb.Fatal if the limiter cannot be made.
func Memory(tb testing.TB) *core.Limiter {
	tb.Helper()
	lim, err := core.NewMemory()
	if err != nil {
		tb.Fatalf("core.NewMemory() = %v", err)
	}
	return lim
}

// FrozenRedis returns a limiter on an in-process Redis whose clock stands
// still at [FrozenTime], so that every Retry-After and reset value is
// exact. The Redis is closed when the test ends.
func FrozenRedis(tb testing.TB) *core.Limiter {
	tb.Helper()
	m := redistest.Miniredis(tb)
	m.SetTime(FrozenTime)
	lim, err := core.New(newClient(tb, m.Addr()))
	if err != nil {
		tb.Fatalf("core.New() = %v", err)
	}
	return lim
}

// DownRedis returns a function making a limiter whose Redis has gone away
// (connections are refused), deciding under policy with a short timeout.
// The limiter logs nothing.
func DownRedis(policy core.FailurePolicy) func(testing.TB) *core.Limiter {
	return func(tb testing.TB) *core.Limiter {
		tb.Helper()
		m := redistest.Miniredis(tb)
		rdb := newClient(tb, m.Addr())
		m.Close()
		lim, err := core.New(rdb,
			core.WithFailurePolicy(policy),
			core.WithTimeout(100*time.Millisecond),
			core.WithLogger(slog.New(slog.DiscardHandler)),
		)
		if err != nil {
			tb.Fatalf("core.New() = %v", err)
		}
		return lim
	}
}

// newClient returns a client for addr that honours context deadlines, as
// core.New requires, and never retries; it is closed when the test ends.
func newClient(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		DialerRetries:         1,
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
