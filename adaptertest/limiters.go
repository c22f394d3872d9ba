package adaptertest

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
)

// FrozenTime is the instant at which [Frozen] stops the clock.
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

// Frozen returns a limiter in process memory whose clock stands still at
// [FrozenTime], so that every Retry-After and reset value is exact. It
// decides with the same arithmetic as a Redis-backed limiter (core's
// differential test holds the two to identical results).
func Frozen(tb testing.TB) *core.Limiter {
	tb.Helper()
	lim, err := core.NewMemory(core.WithClock(func() time.Time { return FrozenTime }))
	if err != nil {
		tb.Fatalf("core.NewMemory(core.WithClock(...)) = %v", err)
	}
	return lim
}

// DownRedis returns a function making a limiter whose Redis has gone away
// (connections are refused), deciding under policy with a short timeout.
// The limiter logs nothing.
func DownRedis(policy core.FailurePolicy) func(testing.TB) *core.Limiter {
	return func(tb testing.TB) *core.Limiter {
		tb.Helper()
		rdb := newClient(tb, refusedAddr(tb))
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

// refusedAddr returns a loopback address nothing listens on: a port the
// kernel just handed out and that was closed again.
func refusedAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen on a free port: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
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

// Logged returns a limiter in process memory, as [Memory] does, whose log
// lines are kept in the Log returned with it.
func Logged(tb testing.TB) (*core.Limiter, *Log) {
	tb.Helper()
	log := &Log{}
	lim, err := core.NewMemory(core.WithLogger(slog.New(log)))
	if err != nil {
		tb.Fatalf("core.NewMemory(core.WithLogger(...)) = %v", err)
	}
	return lim, log
}

// Log is a slog.Handler that keeps every record as one line: the message
// and its attributes as key=value. It is safe for concurrent use.
type Log struct {
	mu    sync.Mutex
	lines []string
}

// Lines returns the lines logged so far.
func (h *Log) Lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.lines...)
}

// Matching returns the lines logged so far that contain s.
func (h *Log) Matching(s string) []string {
	var got []string
	for _, l := range h.Lines() {
		if strings.Contains(l, s) {
			got = append(got, l)
		}
	}
	return got
}

// Enabled reports true: every level is kept.
func (h *Log) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r as one line.
func (h *Log) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	h.mu.Lock()
	h.lines = append(h.lines, b.String())
	h.mu.Unlock()
	return nil
}

// WithAttrs returns h: attributes given ahead are not kept.
func (h *Log) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup returns h: groups are not kept.
func (h *Log) WithGroup(string) slog.Handler { return h }
