package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"

	"github.com/sluicehq/sluice/examples/internal/smoketest"
	"github.com/sluicehq/sluice/grpclimit"
)

// An Interceptor is a Limiter of go-grpc-middleware's ratelimit
// interceptors.
var _ ratelimit.Limiter = (*grpclimit.Interceptor)(nil)

// TestRun serves the example on the embedded Redis, runs the client line it
// prints, and checks each call's answer.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	ctx, cancel := context.WithCancel(context.Background())
	out := new(smoketest.Output)
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the server returned %v after shutdown, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("the server did not return within 10s of its context ending")
		}
	})
	target := waitFor(t, out, regexp.MustCompile(`go run ./examples/grpc -call (\S+)`), done)

	var calls smoketest.Output
	if err := run(context.Background(), []string{"-call", target}, &calls); err != nil {
		t.Fatalf("the client returned %v", err)
	}
	lines := strings.Split(strings.TrimSpace(calls.String()), "\n")
	// x-ratelimit-remaining has one value per interceptor that decided,
	// outermost first: per client, per tenant, per stream method.
	want := []string{
		`Hello, tenant acme -> OK "hello, acme"; x-ratelimit-remaining [99 599]`,
		`Hello, no tenant -> InvalidArgument "the call carries no rate-limit key"; x-ratelimit-remaining [98]`,
		`Count to 3, tenant acme -> OK 1 2 3; x-ratelimit-remaining [97 598 1]`,
		`Count to 3, tenant acme -> OK 1 2 3; x-ratelimit-remaining [96 597 0]`,
		`Count to 3, tenant acme -> ResourceExhausted "rate limit exceeded"; x-ratelimit-remaining [95 596 0]; RetryInfo: retry in 30s`,
	}
	if len(lines) != len(want) {
		t.Fatalf("the client printed %d lines, want %d:\n%s", len(lines), len(want), calls.String())
	}
	// The per-minute buckets refill as the calls go (the tenant's 600/min
	// one token each 100 ms): on a busy machine a value may be a token or
	// two above the one written, never below it.
	space := regexp.MustCompile(`\s+`)
	remaining := regexp.MustCompile(`x-ratelimit-remaining \[([0-9 ]*)\]`)
	for i, line := range lines {
		got := space.ReplaceAllString(line, " ")
		gm, wm := remaining.FindStringSubmatch(got), remaining.FindStringSubmatch(want[i])
		if gm == nil || remaining.ReplaceAllString(got, "") != remaining.ReplaceAllString(want[i], "") || !refilledFrom(gm[1], wm[1]) {
			t.Errorf("line %d: %s\nwant: %s (each remaining value at most 2 above)", i+1, got, want[i])
		}
	}
}

// refilledFrom reports whether the space-separated values got are those of
// want, each the same or up to 2 more.
func refilledFrom(got, want string) bool {
	g, w := strings.Fields(got), strings.Fields(want)
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		a, errA := strconv.Atoi(g[i])
		b, errB := strconv.Atoi(w[i])
		if errA != nil || errB != nil || a < b || a > b+2 {
			return false
		}
	}
	return true
}

// waitFor waits until out holds a match of re and returns its first group,
// failing if run returns first.
func waitFor(t *testing.T, out *smoketest.Output, re *regexp.Regexp, done chan error) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("the server returned %v before serving; output:\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no client line within 10s; output:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
