package grpclimit

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// ender is a unary and a stream interceptor placed after the one under
// test, standing in for a handler whose end the call's metadata chooses:
// x-end: ok ends the call OK (a stream with no message), fail fails it
// with NotFound, panic panics, and hangup waits for the client to hang up
// and returns the context's error; without x-end the health service
// answers. Its recover interceptor, placed first, answers a panic with
// codes.Internal and reports every call's end on ended, once the
// interceptor under test has returned.
type ender struct {
	hanging chan struct{} // a hangup call waits for its client
	ended   chan struct{}
}

func newEnder() *ender {
	return &ender{hanging: make(chan struct{}, 1), ended: make(chan struct{}, 64)}
}

// end returns how the call whose context is ctx ends, and whether it ends
// here rather than in the service.
func (e *ender) end(ctx context.Context) (error, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get("x-end")
	if len(v) == 0 {
		return nil, false
	}
	switch v[0] {
	case "fail":
		return status.Error(codes.NotFound, "not found"), true
	case "panic":
		panic("grpclimit test: the handler panics")
	case "hangup":
		e.hanging <- struct{}{}
		<-ctx.Done()
		return ctx.Err(), true
	}
	return nil, true
}

func (e *ender) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if err, ok := e.end(ctx); ok {
		if err != nil {
			return nil, err
		}
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	}
	return next(ctx, req)
}

func (e *ender) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	if err, ok := e.end(ss.Context()); ok {
		return err
	}
	return next(srv, ss)
}

func (e *ender) recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (res any, err error) {
	defer func() {
		if recover() != nil {
			err = status.Error(codes.Internal, "panic")
		}
		e.ended <- struct{}{}
	}()
	return next(ctx, req)
}

func (e *ender) recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) (err error) {
	defer func() {
		if recover() != nil {
			err = status.Error(codes.Internal, "panic")
		}
		e.ended <- struct{}{}
	}()
	return next(srv, ss)
}

// call makes a call of the kind ("unary" or "stream") that ends as how
// says (see ender), waits until the server is done with it, and returns
// the code the client saw and the header metadata. A hangup call is
// cancelled by its client once it waits in the handler.
func (e *ender) call(t *testing.T, c healthpb.HealthClient, kind, how string) (codes.Code, metadata.MD) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-end", how)
	type result struct {
		err    error
		header metadata.MD
	}
	done := make(chan result, 1)
	go func() {
		var r result
		if kind == "unary" {
			_, r.err = c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&r.header))
		} else {
			var s healthpb.Health_WatchClient
			if s, r.err = c.Watch(ctx, &healthpb.HealthCheckRequest{}); r.err == nil {
				for r.err == nil {
					_, r.err = s.Recv()
				}
				r.header, _ = s.Header()
				if errors.Is(r.err, io.EOF) {
					r.err = nil
				}
			}
		}
		done <- r
	}()
	if how == "hangup" {
		select {
		case <-e.hanging:
		case <-time.After(wait):
			t.Fatalf("%s call that hangs up: not in the handler within %v", kind, wait)
		}
		cancel()
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(wait):
		t.Fatalf("%s call (%s): no answer within %v", kind, how, wait)
	}
	select {
	case <-e.ended:
	case <-time.After(wait):
		t.Fatalf("%s call (%s): the server did not end it within %v", kind, how, wait)
	}
	return status.Code(r.err), r.header
}

// TestChargeIf: on a real Redis, under a limit of 2 a minute, an
// Interceptor WithChargeIf charges a call, unary or a stream, only when
// the code it ends with matches: charging only failed calls, any number
// of successful calls pass (each one's metadata shows the one token it
// reserved, refunded before the next) and two failed ones use the budget
// up, a panic counting as Internal and a client's hang-up as Canceled;
// charging only OK calls, the failed ones are free.
func TestChargeIf(t *testing.T) {
	lim, _ := redisLimiter(t)
	failed := func(code codes.Code) bool { return code != codes.OK }
	succeeded := func(code codes.Code) bool { return code == codes.OK }
	type step struct {
		how       string // see ender
		n         int
		want      codes.Code
		remaining string // x-ratelimit-remaining on each call; "": not checked
	}
	cases := []struct {
		name   string
		charge func(codes.Code) bool
		steps  []step
	}{
		{name: "failures only", charge: failed, steps: []step{
			{"ok", 5, codes.OK, "1"}, {"fail", 2, codes.NotFound, ""}, {"ok", 1, codes.ResourceExhausted, "0"},
		}},
		{name: "failures only, a panic", charge: failed, steps: []step{
			{"panic", 2, codes.Internal, ""}, {"ok", 1, codes.ResourceExhausted, "0"},
		}},
		{name: "failures only, a hang-up", charge: failed, steps: []step{
			{"hangup", 2, codes.Canceled, ""}, {"ok", 1, codes.ResourceExhausted, "0"},
		}},
		{name: "successes only", charge: succeeded, steps: []step{
			{"fail", 5, codes.NotFound, "1"}, {"panic", 1, codes.Internal, "1"}, {"ok", 2, codes.OK, ""},
			{"fail", 1, codes.ResourceExhausted, "0"},
		}},
	}
	for _, kind := range []string{"unary", "stream"} {
		for _, tc := range cases {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				e := newEnder()
				rl := New(lim, core.PerMinute(2), keyfunc.IP(), WithScope(kind+"/"+tc.name), WithChargeIf(tc.charge))
				s := serveWith(t,
					[]grpc.UnaryServerInterceptor{e.recoverUnary, rl.Unary(), e.unary},
					[]grpc.StreamServerInterceptor{e.recoverStream, rl.Stream(), e.stream})
				c := s.dial("203.0.113.7:5000")
				for i, st := range tc.steps {
					for j := range st.n {
						code, md := e.call(t, c, kind, st.how)
						if code != st.want {
							t.Fatalf("step %d, %s call %d: %v, want %v", i+1, st.how, j+1, code, st.want)
						}
						// The metadata goes out before the handler: after
						// refunded calls, it shows one token reserved of two.
						if got := md.Get("x-ratelimit-remaining"); st.remaining != "" && (len(got) != 1 || got[0] != st.remaining) {
							t.Errorf("step %d, %s call %d: x-ratelimit-remaining %q, want %s", i+1, st.how, j+1, got, st.remaining)
						}
					}
				}
			})
		}
	}
}

// TestChargeIfNil: a nil predicate charges every call, as without the
// option.
func TestChargeIfNil(t *testing.T) {
	lim, _ := redisLimiter(t)
	e := newEnder()
	rl := New(lim, core.PerMinute(2), keyfunc.IP(), WithChargeIf(nil))
	s := serveWith(t, []grpc.UnaryServerInterceptor{e.recoverUnary, rl.Unary(), e.unary}, nil)
	c := s.dial("203.0.113.7:5000")
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		if code, _ := e.call(t, c, "unary", "ok"); code != want {
			t.Fatalf("call %d: %v, want %v", i+1, code, want)
		}
	}
}

// TestChargeIfWait: WithWait cannot be combined with WithChargeIf, as in
// every adapter: a waiting call holds no reservation to settle.
func TestChargeIfWait(t *testing.T) {
	defer func() {
		if v := recover(); v == nil || !strings.HasPrefix(v.(error).Error(), "grpclimit: ") {
			t.Errorf("New with WithWait and WithChargeIf panicked with %v, want a grpclimit error", v)
		}
	}()
	New(adaptertest.Memory(t), core.PerMinute(1), keyfunc.IP(), WithWait(time.Second),
		WithChargeIf(func(codes.Code) bool { return true }))
}

// TestCodeOfStatus: the policy's statuses read as the codes the
// interceptor answers with, and the interceptor's codes as themselves.
func TestCodeOfStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   codes.Code
	}{
		{0, codes.OK}, {5, codes.NotFound}, {13, codes.Internal}, {16, codes.Unauthenticated},
		{429, codes.ResourceExhausted}, {400, codes.InvalidArgument}, {403, codes.PermissionDenied},
		{503, codes.Unavailable}, {500, codes.Internal},
	} {
		if got := codeOfStatus(tc.status); got != tc.want {
			t.Errorf("codeOfStatus(%d) = %v, want %v", tc.status, got, tc.want)
		}
	}
}

// TestEndCode: a handler's error ends a call with the code gRPC sends.
func TestEndCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{status.Error(codes.NotFound, "x"), codes.NotFound},
		{context.Canceled, codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{errTest, codes.Unknown},
	} {
		if got := endCode(tc.err); got != tc.want {
			t.Errorf("endCode(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
