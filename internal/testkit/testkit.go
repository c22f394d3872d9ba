// Package testkit holds the small helpers the tests of several packages
// of this module share: a log recorder, a buffer safe for concurrent
// writers, a poll with a deadline, and the TestMain of a package whose
// tests and examples need a private redis-server.
package testkit

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/redistest"
)

// Warnings is a slog.Handler that records the lines logged at Warn and
// above, each as its message and its attributes.
type Warnings struct {
	mu  sync.Mutex
	got []string
}

// Enabled reports whether l is Warn or above.
func (w *Warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

// Handle records r.
func (w *Warnings) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	w.mu.Lock()
	w.got = append(w.got, b.String())
	w.mu.Unlock()
	return nil
}

// WithAttrs returns w: the attributes are not recorded.
func (w *Warnings) WithAttrs([]slog.Attr) slog.Handler { return w }

// WithGroup returns w.
func (w *Warnings) WithGroup(string) slog.Handler { return w }

// Lines returns the lines recorded so far.
func (w *Warnings) Lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got)
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitFor polls cond every 5ms until it holds, failing the test after d,
// and returns how long it took.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// exampleRedis is the server MainWithRedis started for this test binary.
var exampleRedis *redistest.Server

// ExampleAddr returns the address of the redis-server MainWithRedis
// started, emptied first, so that each example starts from nothing even
// when go test -count runs it again.
func ExampleAddr() string {
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		panic(err)
	}
	return exampleRedis.Addr()
}

// MainWithRedis is the TestMain of package pkg: it starts a private
// redis-server for its examples (see ExampleAddr), runs the tests and
// examples, stops the server, and checks that no goroutine of sluice
// outlived them. It returns the exit code. Without a server binary (see
// "Which server" in redistest's package doc) it fails under CI (CI is
// "true" or "1") and otherwise says why and returns 0.
func MainWithRedis(m *testing.M, pkg string) int {
	redistest.QuietClientLogs()
	srv, err := redistest.Launch(redistest.ServerOptions{})
	if err != nil {
		if ci := os.Getenv("CI"); ci == "1" || strings.EqualFold(ci, "true") {
			fmt.Fprintf(os.Stderr, "%s: CI requires a real Redis: %v\n", pkg, err)
			return 1
		}
		fmt.Printf("%s: the tests need redis-server or valkey-server, so they did not run (%v)\n", pkg, err)
		return 0
	}
	exampleRedis = srv
	code := m.Run()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	if code == 0 {
		if err := leakcheck.Check(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}
