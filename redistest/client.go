package redistest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Addr returns the address of a Redis for the test to use.
//
// When the environment variable REDIS_ADDR is set, Addr returns it unchanged
// and starts nothing. That Redis belongs to the caller and may be shared:
// tests must not kill, flush or reconfigure it, and should use keys that
// cannot collide with other users. Otherwise Addr returns Start(tb).Addr(),
// with the skipping and failing rules of [Start].
func Addr(tb testing.TB) string {
	tb.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	return Start(tb).Addr()
}

// NewClient returns a go-redis client for addr, closed at tb.Cleanup. It does
// no network I/O and never fails.
//
// The client is tuned for tests, so that an outage shows up at once and
// deterministically: dial, read and write timeouts of 1s, context deadlines
// honoured (ContextTimeoutEnabled, which core.New requires of a client
// whose own timeouts exceed the limiter's budget), one dial attempt per
// connection, no command retries (MaxRetries -1), and no maintenance
// notifications handshake. The pool keeps go-redis's defaults. Build a
// client by hand with redis.NewClient for other settings.
//
// The client is safe for concurrent use, like every go-redis client.
func NewClient(tb testing.TB, addr string) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:          addr,
		DialTimeout:   time.Second,
		ReadTimeout:   time.Second,
		WriteTimeout:  time.Second,
		DialerRetries: 1,
		MaxRetries:    -1,
		// Honour context deadlines, as sluice's limiter requires of its
		// client (core.New checks it).
		ContextTimeoutEnabled: true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// CommandCalls returns how many times each command has been called on the
// server c talks to, read from INFO commandstats. Keys are lower-case command
// names as Redis reports them, such as "get", "evalsha" or
// "client|setinfo". Commands never called are absent.
//
// Take the difference of two calls to count the commands one operation
// costs. The INFO command that CommandCalls sends is itself counted under
// "info" by the next call. With a cluster client the counts come from
// whichever node answers INFO, so use a single-node client for exact counts.
//
// CommandCalls returns an error if INFO fails or its reply cannot be parsed.
func CommandCalls(ctx context.Context, c redis.UniversalClient) (map[string]int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("redistest: INFO commandstats: %w", err)
	}
	calls, err := parseCommandStats(info)
	if err != nil {
		return nil, fmt.Errorf("redistest: INFO commandstats: %w", err)
	}
	return calls, nil
}

// parseCommandStats reads lines like
//
//	cmdstat_get:calls=1,usec=2,usec_per_call=2.00,rejected_calls=0,failed_calls=0
func parseCommandStats(info string) (map[string]int64, error) {
	calls := make(map[string]int64)
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue // blank, "# Commandstats" or another section
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok || name == "" {
			return nil, fmt.Errorf("malformed line %q", line)
		}
		found := false
		for _, f := range strings.Split(fields, ",") {
			v, ok := strings.CutPrefix(f, "calls=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("malformed calls in line %q: %w", line, err)
			}
			calls[strings.ToLower(name)] = n
			found = true
			break
		}
		if !found {
			return nil, fmt.Errorf("no calls field in line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return calls, nil
}

// QuietClientLogs silences go-redis's own log lines (a failed dial, a pool
// that could not connect) for the rest of the process, so that a test that
// fails on purpose, or by mistake, shows what failed rather than hundreds
// of lines from the client. Call it from TestMain. The limiter's own
// lines go to its slog logger and are not affected.
func QuietClientLogs() { redis.SetLogger(discardLogger{}) }

// discardLogger is a go-redis logger that writes nothing.
type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}
