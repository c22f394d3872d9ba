package grpclimit

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// holder is a unary and a stream interceptor placed after the one under
// test, standing in for a slow handler: a call whose metadata says
// x-do: hold waits in it until the test lets it go, and one that says
// x-do: panic panics. Placed first, its recover interceptor answers a
// panic with codes.Internal and reports every call's end on ended.
type holder struct {
	entered chan chan struct{} // a held call's way to be let go
	ended   chan struct{}      // a call has ended, its interceptors' work done
	stop    chan struct{}      // closed when the test ends: lets every call go
}

func newHolder(t *testing.T) *holder {
	h := &holder{entered: make(chan chan struct{}), ended: make(chan struct{}, 64), stop: make(chan struct{})}
	t.Cleanup(func() { close(h.stop) })
	return h
}

func (h *holder) do(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	switch v := md.Get("x-do"); {
	case len(v) > 0 && v[0] == "hold":
		free := make(chan struct{})
		select {
		case h.entered <- free:
		case <-h.stop:
			return
		}
		select {
		case <-free:
		case <-h.stop:
		}
	case len(v) > 0 && v[0] == "panic":
		panic("grpclimit test: the handler panics")
	}
}

func (h *holder) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	h.do(ctx)
	return next(ctx, req)
}

func (h *holder) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	h.do(ss.Context())
	return next(srv, ss)
}

func (h *holder) recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (res any, err error) {
	defer func() {
		if recover() != nil {
			err = status.Error(codes.Internal, "panic")
		}
		h.ended <- struct{}{}
	}()
	return next(ctx, req)
}

func (h *holder) recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) (err error) {
	defer func() {
		if recover() != nil {
			err = status.Error(codes.Internal, "panic")
		}
		h.ended <- struct{}{}
	}()
	return next(srv, ss)
}

// held waits until a call is held in the handler, and returns the channel
// that lets it go.
func (h *holder) held(t *testing.T, what string) chan struct{} {
	t.Helper()
	select {
	case free := <-h.entered:
		return free
	case <-time.After(wait):
		t.Fatalf("%s: not in the handler within %v", what, wait)
	}
	return nil
}

// waitEnded waits until a call's interceptors have all returned.
func (h *holder) waitEnded(t *testing.T, what string) {
	t.Helper()
	select {
	case <-h.ended:
	case <-time.After(wait):
		t.Fatalf("%s: the call did not end within %v", what, wait)
	}
}

// concurrencyServer serves an Interceptor capped at one call in flight per
// peer, on a real Redis, between the holder's interceptors.
func concurrencyServer(t *testing.T) (*testServer, *holder) {
	t.Helper()
	lim, _ := redisLimiter(t)
	rl := New(lim, core.PerMinute(100), keyfunc.IP(),
		WithConcurrency(core.ConcurrencyLimit{Name: "calls", Max: 1}), WithHeaders(policy.HeadersBoth),
		WithScope("health")) // one cap over the service's methods
	h := newHolder(t)
	s := serveWith(t,
		[]grpc.UnaryServerInterceptor{h.recoverUnary, rl.Unary(), h.unary},
		[]grpc.StreamServerInterceptor{h.recoverStream, rl.Stream(), h.stream})
	return s, h
}

// checkRefused checks a call the cap refused.
func checkRefused(t *testing.T, what string, a answer) {
	t.Helper()
	if a.code != codes.ResourceExhausted || a.msg != msgDenied {
		t.Fatalf("%s: %v, want ResourceExhausted %q", what, a.err, msgDenied)
	}
	for name, want := range map[string]string{
		"retry-after":           "1",
		"ratelimit":             `"calls";r=0`,
		"ratelimit-policy":      `"100/m";q=100;w=60, "calls";q=1;qu="concurrent-requests"`,
		"x-ratelimit-limit":     "1",
		"x-ratelimit-remaining": "0",
	} {
		if got := a.field(name); got != want {
			t.Errorf("%s: %s %q, want %q", what, name, got, want)
		}
	}
	if d, ok := a.retryDelay(); !ok || d != time.Second {
		t.Errorf("%s: RetryInfo delay %v (present %v), want 1s", what, d, ok)
	}
}

// TestConcurrencyUnary: on a real Redis, with a cap of one call in flight
// per peer, a unary call held in its handler makes the next one of its
// peer ResourceExhausted (retry-after 1, the cap in the metadata), and not
// another peer's; its slot is free again once it returns, once a handler
// that panicked has, and once one whose client hung up has.
func TestConcurrencyUnary(t *testing.T) {
	s, h := concurrencyServer(t)
	c := s.dial("203.0.113.7:5000")
	call := func(md ...string) <-chan answer {
		done := make(chan answer, 1)
		go func() { done <- check(t, c, md...) }()
		return done
	}

	first := call("x-do", "hold")
	free := h.held(t, "first call")
	checkRefused(t, "second call while the first runs", check(t, c))
	h.waitEnded(t, "second call")
	if a := check(t, s.dial("203.0.113.8:5000")); a.code != codes.OK {
		t.Errorf("another peer's call: %v, want OK", a.err)
	}
	h.waitEnded(t, "another peer's call")
	close(free)
	if a := <-first; a.code != codes.OK || a.field("ratelimit") == "" {
		t.Errorf("first call: %v, ratelimit %q; want OK with the rate's fields", a.err, a.field("ratelimit"))
	}
	h.waitEnded(t, "first call")
	if a := check(t, c); a.code != codes.OK {
		t.Fatalf("a call after the first returned: %v, want OK", a.err)
	}
	h.waitEnded(t, "a call after the first")

	if a := check(t, c, "x-do", "panic"); a.code != codes.Internal {
		t.Fatalf("a call whose handler panics: %v, want Internal", a.err)
	}
	h.waitEnded(t, "a call whose handler panics")
	if a := check(t, c); a.code != codes.OK {
		t.Fatalf("a call after a handler panicked: %v, want OK", a.err)
	}
	h.waitEnded(t, "a call after a handler panicked")

	ctx, hangUp := context.WithCancel(context.Background())
	done := make(chan answer, 1)
	go func() { done <- checkCtx(metadata.AppendToOutgoingContext(ctx, "x-do", "hold"), c) }()
	free = h.held(t, "a call whose client hangs up")
	hangUp()
	if a := <-done; a.code != codes.Canceled {
		t.Errorf("a call whose client hung up: %v, want Canceled", a.err)
	}
	close(free)
	h.waitEnded(t, "a call whose client hung up")
	if a := check(t, c); a.code != codes.OK {
		t.Errorf("a call after a client hung up: %v, want OK (its slot given back)", a.err)
	}
}

// TestConcurrencyStream: on a real Redis, a stream holds its slot for as
// long as it is open: unary calls and streams of its peer are refused
// meanwhile, and admitted again once it has closed.
func TestConcurrencyStream(t *testing.T) {
	s, h := concurrencyServer(t)
	c := s.dial("203.0.113.7:5000")

	ctx, closeStream := context.WithCancel(context.Background())
	defer closeStream()
	stream, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		t.Fatalf("first stream: %v, want its first message", err)
	}
	checkRefused(t, "a unary call while the stream is open", check(t, c))
	h.waitEnded(t, "a unary call while the stream is open")
	checkRefused(t, "a second stream", watch(t, c))
	h.waitEnded(t, "a second stream")

	closeStream()
	h.waitEnded(t, "the first stream")
	if a := check(t, c); a.code != codes.OK {
		t.Errorf("a unary call after the stream closed: %v, want OK", a.err)
	}
}

// TestConcurrencyLimit: Limit, which cannot tell when a call ends, takes
// no slot: the calls it admits never fill the cap.
func TestConcurrencyLimit(t *testing.T) {
	lim, _ := redisLimiter(t)
	rl := New(lim, core.PerMinute(100), keyfunc.Static("all"), WithConcurrency(core.ConcurrencyLimit{Max: 1}))
	for i := range 3 {
		if err := rl.Limit(context.Background()); err != nil {
			t.Fatalf("Limit call %d = %v, want nil", i+1, err)
		}
	}
}
