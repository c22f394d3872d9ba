package core

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// flakyScripter fails the script calls for which fail returns true, at
// once, as a store that refuses some calls would.
type flakyScripter struct {
	redis.Scripter
	fail func() bool
}

// errFlaky is a refused dial, as the net package reports it.
var errFlaky error = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

func (f *flakyScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if f.fail() {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(errFlaky)
		return cmd
	}
	return f.Scripter.EvalSha(ctx, sha, keys, args...)
}

// logLines is a slog.Handler that keeps every record's message.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (h *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (h *logLines) Handle(_ context.Context, r slog.Record) error {
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
func (h *logLines) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logLines) WithGroup(string) slog.Handler      { return h }

func (h *logLines) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.lines
	h.lines = nil
	return l
}

// TestFlappingStoreLogsAHandful: a store failing 20% to 50% of calls for 10
// seconds (on the limiter's clock: one decision per 4 ms) opens and
// closes the breaker over and over. The Observer hears of every outage; the
// log gets the first outage, its recovery and summaries, a handful of lines
// in all. Before, each outage logged two lines. An outage that then lasts
// is logged once it has lasted 10 s, and its recovery with it; a clean
// outage after a quiet spell is logged at once.
func TestFlappingStoreLogsAHandful(t *testing.T) {
	// Redis decides on the limiter's clock (see clockScripter), where the
	// traffic stays under the limit: no denial, so no deny cache answering
	// in the store's place, and the same calls fail on every run.
	now := time.Now().UnixMicro()
	clock := func() int64 { return now }
	rdb := clockScripter{Scripter: redistest.NewClient(t, redistest.Addr(t)), now: clock}
	r := rand.New(rand.NewPCG(1, 2))
	var failShare float64 // the share of calls that fail now
	store := &flakyScripter{Scripter: rdb, fail: func() bool { return r.Float64() < failShare }}
	logs := &logLines{}
	rec := newRecorder()
	lim, err := New(store, WithLogger(slog.New(logs)), WithObserver(rec), WithFallbackReplicas(2),
		WithPrefix(uniquePrefix()), WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lim.now = clock
	ctx := context.Background()
	limit := PerSecond(1000)
	// run makes one decision per step for d, with share(t) of the calls
	// failing t into the phase.
	const fine, coarse = 4 * time.Millisecond, 20 * time.Millisecond
	run := func(d, step time.Duration, share func(t time.Duration) float64) {
		t.Helper()
		for at := time.Duration(0); at < d; at += step {
			failShare = share(at)
			if _, err := lim.Allow(ctx, "k", limit); err != nil {
				t.Fatalf("Allow under FallbackLocal: %v", err)
			}
			now += step.Microseconds()
		}
	}
	outages := func() int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.degraded)
	}

	run(time.Second, coarse, func(time.Duration) float64 { return 0 })
	run(10*time.Second, fine, func(at time.Duration) float64 { return 0.2 + 0.3*float64(at)/float64(10*time.Second) })
	flapped := outages()
	lines := logs.take()
	t.Logf("10 s of a store failing 20%%–50%% of calls: %d outages, %d log lines:\n%s", flapped, len(lines), strings.Join(lines, "\n"))
	if flapped < 5 { // 5 outages logged two lines each before
		t.Fatalf("only %d outages in 10 s of flapping; the test needs many to mean anything", flapped)
	}
	if len(lines) > 5 {
		t.Errorf("%d log lines for %d outages, want at most 5", len(lines), flapped)
	}

	// Straight into a long outage, within 10 s of the last recovery.
	run(15*time.Second, coarse, func(time.Duration) float64 { return 1 })
	run(2*time.Second, coarse, func(time.Duration) float64 { return 0 })
	lines = logs.take()
	t.Logf("then 15 s down and back:\n%s", strings.Join(lines, "\n"))
	if !logged(lines, "store unavailable", "down_for=") || !logged(lines, "store recovered") {
		t.Errorf("a 15 s outage after flapping was not logged with its recovery: %q", lines)
	}

	// A quiet spell, then a clean 2 s outage: logged at once, two lines.
	run(20*time.Second, coarse, func(time.Duration) float64 { return 0 })
	logs.take()
	run(2*time.Second, coarse, func(time.Duration) float64 { return 1 })
	lines = logs.take()
	if len(lines) != 1 || !logged(lines, "store unavailable", "reason=refused") || logged(lines, "down_for=") {
		t.Errorf("a clean outage's start logged as %q, want one line at once with its reason", lines)
	}
	run(time.Second, coarse, func(time.Duration) float64 { return 0 })
	if lines = logs.take(); len(lines) != 1 || !logged(lines, "store recovered") {
		t.Errorf("a clean outage's end logged as %q, want one line", lines)
	}
}

// logged reports whether one of lines contains every one of parts.
func logged(lines []string, parts ...string) bool {
	for _, l := range lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}

// TestBreakerOptions: WithBreaker's settings reach the breakers, zero
// fields keep their defaults, and bad ones are refused by name.
func TestBreakerOptions(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := New(rdb, WithBreaker(Breaker{Successes: 5}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := redisOf(lim).WholeBreaker(), `threshold 3, closeAfter 5, cooldown 100000µs, node "127.0.0.1:1"`; got != want {
		t.Fatalf("breaker = %s; want %s", got, want)
	}
	for _, tc := range []struct {
		b    Breaker
		want string
	}{
		{Breaker{Failures: -1}, "Failures is -1"},
		{Breaker{Probe: time.Microsecond}, "Probe is 1µs"},
		{Breaker{Probe: time.Hour}, "Probe is 1h0m0s"},
		{Breaker{Successes: 101}, "Successes is 101"},
	} {
		_, err := NewMemory(WithBreaker(tc.b))
		if err == nil || !strings.Contains(err.Error(), "WithBreaker: "+tc.want) {
			t.Errorf("WithBreaker(%+v): %v, want an error saying %q", tc.b, err, tc.want)
		}
	}
}

// TestErrorReason classifies the errors a store call can end with.
func TestErrorReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{context.DeadlineExceeded, ReasonTimeout},
		{errFlaky, ReasonRefused},
		{errors.New("dial tcp: connect: connection refused"), ReasonOther}, // only words
		{proto("LOADING Redis is loading the dataset in memory"), ReasonLoading},
		{proto("READONLY You can't write against a read only replica."), ReasonReadOnly},
		{proto("CLUSTERDOWN The cluster is down"), ReasonClusterDown},
		{proto("OOM command not allowed when used memory > 'maxmemory'."), ReasonOOM},
		{proto("ERR user_script:1: attempt to compare nil with number"), ReasonScript},
		{proto("ERR unknown command"), ReasonOther},
		{redisstore.ErrKeyFailed, ReasonScript},
		{redis.ErrClosed, ReasonConnection},
	} {
		if got := ErrorReason(tc.err); got != tc.want {
			t.Errorf("ErrorReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	// Real failures from a real client.
	ctx := context.Background()
	refused := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer refused.Close()
	if got := ErrorReason(refused.Ping(ctx).Err()); got != ReasonRefused {
		t.Errorf("a refused dial: %q, want %q", got, ReasonRefused)
	}
}

// proto is a Redis error reply.
type proto string

func (e proto) Error() string { return string(e) }
func (proto) RedisError()     {}
