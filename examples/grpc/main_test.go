package main

import (
	"context"
	"regexp"
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
	space := regexp.MustCompile(`\s+`)
	for i, line := range lines {
		if got := space.ReplaceAllString(line, " "); got != want[i] {
			t.Errorf("line %d: %s\nwant: %s", i+1, got, want[i])
		}
	}
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
