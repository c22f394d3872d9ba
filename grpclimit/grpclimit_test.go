package grpclimit

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }

// TestUnary: on a real Redis, unary calls are admitted with the rate-limit
// metadata until the limit is spent, then refused with ResourceExhausted,
// retry-after and a RetryInfo detail, without reaching the service; each
// peer has its own bucket.
func TestUnary(t *testing.T) {
	lim, _ := redisLimiter(t)
	s := serve(t, New(lim, core.PerMinute(2), keyfunc.IP()))
	c := s.dial("203.0.113.7:5000")
	for i, want := range []struct {
		code      codes.Code
		remaining string
	}{{codes.OK, "1"}, {codes.OK, "0"}, {codes.ResourceExhausted, "0"}} {
		a := check(t, c)
		if a.code != want.code {
			t.Fatalf("call %d: %v, want %v", i+1, a.err, want.code)
		}
		if got := a.field("x-ratelimit-limit"); got != "2" {
			t.Errorf("call %d: x-ratelimit-limit %q, want 2", i+1, got)
		}
		if got := a.field("x-ratelimit-remaining"); got != want.remaining {
			t.Errorf("call %d: x-ratelimit-remaining %q, want %s", i+1, got, want.remaining)
		}
		if got := a.field("x-ratelimit-reset"); got == "" || got == "0" {
			t.Errorf("call %d: x-ratelimit-reset %q, want a positive count of seconds", i+1, got)
		}
		retryAfter := a.field("retry-after")
		delay, hasDelay := a.retryDelay()
		if want.code == codes.OK {
			if retryAfter != "" || hasDelay {
				t.Errorf("call %d: admitted with retry-after %q and RetryInfo %v", i+1, retryAfter, hasDelay)
			}
			continue
		}
		if a.msg != msgDenied {
			t.Errorf("call %d: message %q, want %q", i+1, a.msg, msgDenied)
		}
		if retryAfter != "30" {
			t.Errorf("call %d: retry-after %q, want 30 (one token every 30 s, rounded up)", i+1, retryAfter)
		}
		if !hasDelay || delay <= 25*time.Second || delay > 30*time.Second {
			t.Errorf("call %d: RetryInfo delay %v (present %v), want just under 30s", i+1, delay, hasDelay)
		}
	}
	if got := s.handled.Load(); got != 2 {
		t.Errorf("%d calls reached the service, want 2", got)
	}
	if a := check(t, s.dial("203.0.113.8:5000")); a.code != codes.OK {
		t.Errorf("another peer: %v, want OK (a bucket of its own)", a.err)
	}
}

// TestStream: on a real Redis, a stream is decided once when it opens,
// with the metadata on its header; a refused stream fails its first
// receive with ResourceExhausted and RetryInfo. Unary and stream calls
// through one Interceptor share its buckets.
func TestStream(t *testing.T) {
	lim, _ := redisLimiter(t)
	// One scope over the service's methods: one bucket for Watch and Check.
	s := serve(t, New(lim, core.PerMinute(2), keyfunc.IP(), WithScope("health")))
	c := s.dial("203.0.113.7:5000")
	a := watch(t, c)
	if a.code != codes.OK || a.field("x-ratelimit-remaining") != "1" {
		t.Fatalf("first stream: %v, x-ratelimit-remaining %q; want OK and 1", a.err, a.field("x-ratelimit-remaining"))
	}
	if a := check(t, c); a.code != codes.OK || a.field("x-ratelimit-remaining") != "0" {
		t.Fatalf("unary call after the stream: %v, x-ratelimit-remaining %q; want OK and 0 (one bucket)", a.err, a.field("x-ratelimit-remaining"))
	}
	a = watch(t, c)
	if a.code != codes.ResourceExhausted || a.msg != msgDenied {
		t.Fatalf("third call, a stream: %v, want ResourceExhausted %q", a.err, msgDenied)
	}
	if d, ok := a.retryDelay(); !ok || d <= 0 {
		t.Errorf("refused stream: RetryInfo delay %v (present %v), want positive", d, ok)
	}
	if got := a.field("retry-after"); got != "30" {
		t.Errorf("refused stream: retry-after %q, want 30", got)
	}
	if got := s.handled.Load(); got != 2 {
		t.Errorf("%d calls reached the service, want 2", got)
	}
}

// TestDeadlineExceeded: on a real Redis, a call whose deadline passes
// while Redis does not answer fails with DeadlineExceeded on the client
// (and DeadlineExceeded or Canceled on the server, whichever it learns
// first), never reaches the service, and is not taken for a store failure
// (which FailClosed would answer Unavailable). A call that hangs up while
// it waits for tokens ends as Canceled. A call whose deadline comes before
// its tokens would be due is refused at once rather than held.
func TestDeadlineExceeded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit core.Limit
		opts  []Option
		setup func(*redistest.Proxy) // before the second call
		call  func(healthpb.HealthClient) answer
		want  codes.Code
	}{
		{name: "Redis does not answer", limit: core.PerMinute(100),
			setup: func(p *redistest.Proxy) { p.SetBlackhole(true) }, call: callWithin(200 * time.Millisecond), want: codes.DeadlineExceeded},
		{name: "the client hangs up while waiting for tokens", limit: core.Limit{Rate: 1, Period: 10 * time.Second, Burst: 1},
			opts: []Option{WithWait(time.Minute)}, call: callCanceledAfter(200 * time.Millisecond), want: codes.Canceled},
		{name: "the deadline comes before the tokens", limit: core.Limit{Rate: 1, Period: 10 * time.Second, Burst: 1},
			opts: []Option{WithWait(time.Minute)}, call: callWithin(5 * time.Second), want: codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A budget far above the call's deadline, so that the deadline
			// ends the Redis call, and the failure policy that would show a
			// store failure as Unavailable.
			lim, proxy := redisLimiter(t, core.WithTimeout(time.Minute), core.WithFailurePolicy(core.FailClosed))
			rl := New(lim, tc.limit, keyfunc.IP(), tc.opts...)
			var rec errorRecorder
			s := serveWith(t, []grpc.UnaryServerInterceptor{rec.unary, rl.Unary()}, nil)
			c := s.dial("203.0.113.7:5000")
			if a := check(t, c); a.code != codes.OK {
				t.Fatalf("first call: %v, want OK", a.err)
			}
			if tc.setup != nil {
				tc.setup(proxy)
			}
			start := time.Now()
			if a := tc.call(c); a.code != tc.want {
				t.Fatalf("second call: %v, want %v", a.err, tc.want)
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("second call took %v, want an answer at its deadline or at once", d)
			}
			eventually(t, "the server's answer to the second call", func() bool {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				return len(rec.errs) == 2
			})
			err, _ := rec.last()
			st, _ := status.FromError(err)
			switch tc.want {
			case codes.ResourceExhausted:
				if st.Code() != tc.want || st.Message() != msgDenied {
					t.Errorf("the server answered the second call %v, want %v %q", err, tc.want, msgDenied)
				}
			default:
				// The server sees its own deadline pass, or first the
				// client's cancellation when the client's deadline passes:
				// either says the call ended first.
				if c := st.Code(); (c != codes.Canceled && c != codes.DeadlineExceeded) || (tc.want == codes.Canceled && c != codes.Canceled) || st.Message() != msgEnded {
					t.Errorf("the server answered the second call %v, want Canceled or DeadlineExceeded %q", err, msgEnded)
				}
			}
			if got := s.handled.Load(); got != 1 {
				t.Errorf("%d calls reached the service, want 1", got)
			}
		})
	}
}

// callWithin makes a Check call with deadline d.
func callWithin(d time.Duration) func(healthpb.HealthClient) answer {
	return func(c healthpb.HealthClient) answer {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return checkCtx(ctx, c)
	}
}

// callCanceledAfter makes a Check call that the client cancels after d.
func callCanceledAfter(d time.Duration) func(healthpb.HealthClient) answer {
	return func(c healthpb.HealthClient) answer {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(d, cancel)
		return checkCtx(ctx, c)
	}
}

// TestDegradedStore: with Redis gone, the default FallbackLocal goes on
// limiting in process memory, with the metadata; FailClosed refuses with
// Unavailable and a fixed message, and admits again once Redis is back.
func TestDegradedStore(t *testing.T) {
	t.Run("FallbackLocal", func(t *testing.T) {
		// One replica: the limit whole (a replica that has not met its
		// fleet yet otherwise enforces core.UnmetFleet's share).
		lim, proxy := redisLimiter(t, core.WithFallbackReplicas(1))
		s := serve(t, New(lim, core.PerMinute(2), keyfunc.IP()))
		c := s.dial("203.0.113.7:5000")
		if err := proxy.SetDown(true); err != nil {
			t.Fatal(err)
		}
		for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
			a := check(t, c)
			if a.code != want {
				t.Fatalf("call %d with Redis down: %v, want %v", i+1, a.err, want)
			}
			if a.field("x-ratelimit-limit") != "2" {
				t.Errorf("call %d with Redis down: metadata %v, want x-ratelimit-limit 2", i+1, a.header)
			}
		}
		if got := s.handled.Load(); got != 2 {
			t.Errorf("%d calls reached the service, want 2", got)
		}
	})
	t.Run("FailClosed", func(t *testing.T) {
		lim, proxy := redisLimiter(t, core.WithFailurePolicy(core.FailClosed))
		s := serve(t, New(lim, core.PerMinute(100), keyfunc.IP()))
		c := s.dial("203.0.113.7:5000")
		if err := proxy.SetDown(true); err != nil {
			t.Fatal(err)
		}
		for _, call := range []func(*testing.T, healthpb.HealthClient, ...string) answer{check, watch} {
			a := call(t, c)
			if a.code != codes.Unavailable || a.msg != msgUnavailable {
				t.Errorf("with Redis down: %v, want Unavailable %q", a.err, msgUnavailable)
			}
			if len(a.header) != 0 && a.field("x-ratelimit-limit") != "" {
				t.Errorf("with Redis down: rate-limit metadata %v on a call that was not decided", a.header)
			}
		}
		if got := s.handled.Load(); got != 0 {
			t.Errorf("%d calls reached the service, want 0", got)
		}
		if err := proxy.SetDown(false); err != nil {
			t.Fatal(err)
		}
		eventually(t, "a call admitted after Redis came back", func() bool { return check(t, c).code == codes.OK })
	})
}

// TestKeys: the extractors of keyfunc read the call: metadata, the peer
// (through trusted proxies by x-forwarded-for), the full method and values
// of the call's context; Key reads the context itself.
func TestKeys(t *testing.T) {
	type userKey struct{}
	for _, tc := range []struct {
		name   string
		key    keyfunc.Func
		peer   string
		md     []string
		stream bool
		want   string // "" for a call refused with InvalidArgument
	}{
		{name: "peer", key: keyfunc.IP(), peer: "203.0.113.7:5000", want: "ip:203.0.113.7"},
		{name: "peer, forwarding metadata ignored", key: keyfunc.IP(), peer: "203.0.113.7:5000",
			md: []string{"x-forwarded-for", "198.51.100.9"}, want: "ip:203.0.113.7"},
		{name: "trusted proxy", key: keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8")), peer: "10.1.2.3:5000",
			md: []string{"x-forwarded-for", "198.51.100.9, 10.0.0.5"}, want: "ip:198.51.100.9"},
		{name: "trusted proxy, two lines", key: keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8")), peer: "10.1.2.3:5000",
			md: []string{"x-forwarded-for", "198.51.100.9", "x-forwarded-for", "10.0.0.5"}, want: "ip:198.51.100.9"},
		{name: "untrusted peer with forwarding metadata", key: keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8")), peer: "192.0.2.1:5000",
			md: []string{"x-forwarded-for", "198.51.100.9"}, want: "ip:192.0.2.1"},
		{name: "IPv6 peer", key: keyfunc.IP(), peer: "[2001:db8:1:2::7]:5000", want: "ip:2001:db8:1:2::/64"},
		{name: "peer without an IP address", key: keyfunc.IP()},
		{name: "tenant metadata", key: keyfunc.Tenant("X-Tenant-ID"), md: []string{"x-tenant-id", "acme"}, want: "tenant:acme"},
		{name: "tenant metadata missing", key: keyfunc.Tenant("X-Tenant-ID")},
		{name: "header on two lines", key: keyfunc.Header("x-api-key"), md: []string{"x-api-key", "a", "x-api-key", "b"}, want: "header:x-api-key:a, b"},
		{name: "full method", key: keyfunc.Route(), want: "route:POST " + methodCheck},
		{name: "full method of a stream", key: keyfunc.Route(), stream: true, want: "route:POST " + methodWatch},
		{name: "context value", key: keyfunc.User(userKey{}), md: []string{"user", "42"}, want: "user:42"},
		{name: "joined", key: keyfunc.Join(keyfunc.Tenant("x-tenant-id"), keyfunc.Route()), md: []string{"x-tenant-id", "a|b"},
			want: `tenant:a\|b|route:POST ` + methodCheck},
		{name: "native", key: Key(func(ctx context.Context) (string, error) {
			m, _ := grpc.Method(ctx)
			return "method:" + m, nil
		}), stream: true, want: "method:" + methodWatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			key := func(r keyfunc.Request) (string, error) {
				k, err := tc.key(r)
				got = k
				return k, err
			}
			rl := New(adaptertest.Memory(t), core.PerMinute(10), key)
			// An authentication interceptor, before the limit, stores the
			// user it found in the call's context.
			auth := func(ctx context.Context) context.Context {
				if u := metadata.ValueFromIncomingContext(ctx, "user"); len(u) == 1 {
					return context.WithValue(ctx, userKey{}, u[0])
				}
				return ctx
			}
			s := serveWith(t,
				[]grpc.UnaryServerInterceptor{func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
					return h(auth(ctx), req)
				}, rl.Unary()},
				[]grpc.StreamServerInterceptor{rl.Stream()})
			c := s.dial(tc.peer)
			var a answer
			if tc.stream {
				a = watch(t, c, tc.md...)
			} else {
				a = check(t, c, tc.md...)
			}
			if tc.want == "" {
				if a.code != codes.InvalidArgument || a.msg != msgNoKey {
					t.Errorf("call: %v, want InvalidArgument %q", a.err, msgNoKey)
				}
				if n := s.handled.Load(); n != 0 {
					t.Errorf("a call without a key reached the service")
				}
				return
			}
			if a.code != codes.OK || got != tc.want {
				t.Errorf("call: %v, key %q; want OK and %q", a.err, got, tc.want)
			}
		})
	}
}

// TestHandlers: a deny or error handler's error is the call's answer, and
// nil lets the call go on; the error handler is given the cause.
func TestHandlers(t *testing.T) {
	slowDown := status.Error(codes.ResourceExhausted, "slow down")
	for _, tc := range []struct {
		name    string
		key     keyfunc.Func
		opts    []Option
		want    codes.Code
		msg     string
		handled int32
	}{
		{name: "deny handler", key: keyfunc.Static("all"), want: codes.ResourceExhausted, msg: "slow down", handled: 1,
			opts: []Option{WithDenyHandler(func(_ context.Context, res core.Result) error {
				if res.Allowed || res.RetryAfter <= 0 {
					return status.Error(codes.Internal, "bad result")
				}
				return slowDown
			})}},
		{name: "deny handler lets the call go on", key: keyfunc.Static("all"), want: codes.OK, handled: 2,
			opts: []Option{WithDenyHandler(func(context.Context, core.Result) error { return nil })}},
		{name: "error handler", key: keyfunc.Tenant("x-tenant-id"), want: codes.PermissionDenied, msg: "who are you", handled: 0,
			opts: []Option{WithErrorHandler(func(_ context.Context, err error) error {
				if !errors.Is(err, keyfunc.ErrNoKey) {
					return status.Error(codes.Internal, "bad error")
				}
				return status.Error(codes.PermissionDenied, "who are you")
			})}},
		{name: "error handler fails open", key: keyfunc.Tenant("x-tenant-id"), want: codes.OK, handled: 2,
			opts: []Option{WithErrorHandler(func(context.Context, error) error { return nil })}},
		{name: "nil handlers restore the defaults", key: keyfunc.Static("all"), want: codes.ResourceExhausted, msg: msgDenied, handled: 1,
			opts: []Option{WithDenyHandler(func(context.Context, core.Result) error { return nil }), WithDenyHandler(nil), WithErrorHandler(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serve(t, New(adaptertest.Memory(t), core.PerMinute(1), tc.key, tc.opts...))
			c := s.dial("203.0.113.7:5000")
			check(t, c)
			a := check(t, c)
			if a.code != tc.want || (tc.msg != "" && a.msg != tc.msg) {
				t.Errorf("second call: %v, want %v %q", a.err, tc.want, tc.msg)
			}
			if got := s.handled.Load(); got != tc.handled {
				t.Errorf("%d calls reached the service, want %d", got, tc.handled)
			}
		})
	}
}

// TestHeaders: WithHeaders chooses the metadata, under lower-case names;
// retry-after comes with every refusal.
func TestHeaders(t *testing.T) {
	for _, tc := range []struct {
		style       policy.HeaderStyle
		admitted    []string // fields of the admitted call
		refused     []string // fields of the refused call
		notAdmitted []string
	}{
		{policy.HeadersLegacy, []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"},
			[]string{"retry-after", "x-ratelimit-remaining"}, []string{"ratelimit", "retry-after"}},
		{policy.HeadersIETF, []string{"ratelimit-policy", "ratelimit"}, []string{"retry-after", "ratelimit"}, []string{"x-ratelimit-limit"}},
		{policy.HeadersBoth, []string{"ratelimit-policy", "ratelimit", "x-ratelimit-limit"}, []string{"retry-after"}, nil},
		{policy.HeadersNone, nil, []string{"retry-after"}, []string{"x-ratelimit-limit", "ratelimit"}},
	} {
		s := serve(t, New(adaptertest.Frozen(t), core.PerMinute(1), keyfunc.Static("all"), WithHeaders(tc.style)))
		c := s.dial("203.0.113.7:5000")
		for _, step := range []struct {
			have, lack []string
		}{{tc.admitted, tc.notAdmitted}, {tc.refused, nil}} {
			a := check(t, c)
			for _, name := range step.have {
				if a.field(name) == "" {
					t.Errorf("style %d, %v: no %s in %v", tc.style, a.code, name, a.header)
				}
			}
			for _, name := range step.lack {
				if a.field(name) != "" {
					t.Errorf("style %d, %v: %s in %v", tc.style, a.code, name, a.header)
				}
			}
		}
	}
	s := serve(t, New(adaptertest.Frozen(t), core.PerMinute(1), keyfunc.Static("all"), WithHeaders(policy.HeadersIETF)))
	a := check(t, s.dial("203.0.113.7:5000"))
	if got, want := a.field("ratelimit"), ";r=0;t=60"; !strings.HasSuffix(got, want) {
		t.Errorf("ratelimit %q, want the limit's name and %q", got, want)
	}
}

// TestRetryJitter: with WithRetryJitter, the RetryInfo delay is the
// jittered retry-after whenever the jitter shows in it, and the exact wait
// otherwise.
func TestRetryJitter(t *testing.T) {
	s := serve(t, New(adaptertest.Frozen(t), core.PerMinute(1), keyfunc.Static("all"), WithRetryJitter(10*time.Second)))
	c := s.dial("203.0.113.7:5000")
	check(t, c)
	seen := map[string]bool{}
	for range 40 {
		a := check(t, c)
		ra, err := strconv.Atoi(a.field("retry-after"))
		if a.code != codes.ResourceExhausted || err != nil || ra < 60 || ra > 70 {
			t.Fatalf("refused call: %v, retry-after %q; want ResourceExhausted and 60 to 70", a.err, a.field("retry-after"))
		}
		delay, _ := a.retryDelay()
		if want := time.Duration(ra) * time.Second; delay != want {
			t.Fatalf("retry-after %d, RetryInfo delay %v; want %v", ra, delay, want)
		}
		seen[a.field("retry-after")] = true
	}
	if len(seen) < 2 {
		t.Errorf("40 refusals all said retry-after %v: no jitter", seen)
	}
}

func TestRetryDelay(t *testing.T) {
	for _, tc := range []struct {
		wait       time.Duration
		retryAfter string
		want       time.Duration
	}{
		{100 * time.Millisecond, "1", 100 * time.Millisecond},
		{100 * time.Millisecond, "2", 2 * time.Second},
		{1500 * time.Millisecond, "2", 1500 * time.Millisecond},
		{1500 * time.Millisecond, "3", 3 * time.Second},
		{time.Minute, "60", time.Minute},
		{time.Minute, "61", 61 * time.Second},
		{time.Minute, "", time.Minute},
		{time.Minute, "soon", time.Minute},
		{time.Minute, "99999999999999999", time.Minute},
	} {
		if got := retryDelay(tc.wait, tc.retryAfter); got != tc.want {
			t.Errorf("retryDelay(%v, %q) = %v, want %v", tc.wait, tc.retryAfter, got, tc.want)
		}
	}
}

// TestSkipAndDryRun: skipped calls pass without a decision or metadata;
// dry-run calls are decided but never refused.
func TestSkipAndDryRun(t *testing.T) {
	lim := adaptertest.Memory(t)
	skipWatch := WithSkip(func(ctx context.Context) bool {
		m, _ := grpc.Method(ctx)
		return m == methodWatch
	})
	var reports []policy.DryRunReport
	rl := New(lim, core.PerMinute(1), keyfunc.Static("all"), skipWatch,
		WithDryRun(true), WithDryRunHandler(func(_ context.Context, rep policy.DryRunReport) { reports = append(reports, rep) }))
	s := serve(t, rl)
	c := s.dial("203.0.113.7:5000")
	for i := range 3 {
		if a := watch(t, c); a.code != codes.OK || a.field("x-ratelimit-limit") != "" {
			t.Errorf("skipped stream %d: %v, metadata %v; want OK and none", i+1, a.err, a.header)
		}
		if a := check(t, c); a.code != codes.OK || a.field("x-ratelimit-limit") != "" {
			t.Errorf("dry-run call %d: %v, metadata %v; want OK and none", i+1, a.err, a.header)
		}
	}
	if len(reports) != 3 || reports[0].Result.Allowed == reports[2].Result.Allowed {
		t.Errorf("dry-run reports %+v, want three, the first admitted and the last not", reports)
	}
}

// TestLimit: Limit serves go-grpc-middleware's ratelimit interceptors,
// whose Limiter interface it satisfies: nil admits, an error refuses, and
// the metadata is set on unary calls and streams. Outside a server it
// fails without panicking.
func TestLimit(t *testing.T) {
	// The interface and interceptors of
	// github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit,
	// as that package defines them; examples/grpc's tests use the package
	// itself.
	type limiter interface {
		Limit(ctx context.Context) error
	}
	var rl limiter = New(adaptertest.Memory(t), core.PerMinute(2), keyfunc.Join(keyfunc.IP(), keyfunc.Route()))
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := rl.Limit(ctx); err != nil {
			return nil, status.Errorf(codes.ResourceExhausted, "%s is rejected by grpc_ratelimit middleware, please retry later. %s", info.FullMethod, err)
		}
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := rl.Limit(ss.Context()); err != nil {
			return status.Errorf(codes.ResourceExhausted, "%s is rejected by grpc_ratelimit middleware, please retry later. %s", info.FullMethod, err)
		}
		return handler(srv, ss)
	}
	s := serveWith(t, []grpc.UnaryServerInterceptor{unary}, []grpc.StreamServerInterceptor{stream})
	c := s.dial("203.0.113.7:5000")
	for _, call := range []func(*testing.T, healthpb.HealthClient, ...string) answer{check, watch} {
		for i, want := range []string{"1", "0"} {
			if a := call(t, c); a.code != codes.OK || a.field("x-ratelimit-remaining") != want {
				t.Errorf("call %d: %v, x-ratelimit-remaining %q; want OK and %s", i+1, a.err, a.field("x-ratelimit-remaining"), want)
			}
		}
		a := call(t, c)
		if a.code != codes.ResourceExhausted || !strings.Contains(a.msg, msgDenied) || a.field("retry-after") == "" {
			t.Errorf("third call: %v, metadata %v; want ResourceExhausted with %q and retry-after", a.err, a.header, msgDenied)
		}
	}
	if got := s.handled.Load(); got != 4 {
		t.Errorf("%d calls reached the service, want 4", got)
	}

	ctx := context.Background()
	if err := New(adaptertest.Memory(t), core.PerMinute(1), keyfunc.Static("all")).Limit(ctx); err != nil {
		t.Errorf("Limit(context.Background()) with a static key = %v, want nil", err)
	}
	if err := rl.Limit(ctx); codeOf(err) != codes.InvalidArgument {
		t.Errorf("Limit(context.Background()) with a peer and route key = %v, want InvalidArgument", err)
	}
}

// TestBuckets: an Interceptor's buckets are named by the limits and, with
// WithPerRoute(true), the call's full method (its route), never by where
// or in what order the Interceptor was made: two Interceptors, as two
// builds of one service would make them, on two limiters against one
// Redis, count each method in one bucket and share a penalty lock; per
// method, methods are apart; without an option, or with WithScope, one
// budget covers every method; a penalty set on one Interceptor locks
// nothing for another on the same engine.
func TestBuckets(t *testing.T) {
	addr := redistest.Start(t).Addr()
	replica := func() *core.Limiter {
		lim, err := core.New(redistest.NewClient(t, addr), core.WithTimeout(5*time.Second), core.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lim.Close() })
		return lim
	}
	one, two := replica(), replica()
	static := keyfunc.Static("all")
	// Build 1 makes its Interceptors in one order, build 2 in the other.
	v1Login := New(one, core.PerMinute(1), static, WithPenalty(time.Hour))
	v1 := New(one, core.PerMinute(2), static, WithPerRoute(true))
	v2 := New(two, core.PerMinute(2), static, WithPerRoute(true))
	v2Login := New(two, core.PerMinute(1), static, WithPenalty(time.Hour))
	api := func(lim *core.Limiter) *Interceptor { return New(lim, core.PerMinute(2), static, WithScope("api")) }
	v1API, v2API := api(one), api(two)
	server := func(lim *core.Limiter) *Interceptor { return New(lim, core.PerMinute(3), static) }
	v1Server, v2Server := server(one), server(two)
	for i, st := range []struct {
		l      *Interceptor
		method string
		want   codes.Code
		locked bool
	}{
		{v1, "/shop.Orders/Get", codes.OK, false},
		{v2, "/shop.Orders/Get", codes.OK, false}, // one bucket across builds
		{v1, "/shop.Orders/Get", codes.ResourceExhausted, false},
		{v2, "/shop.Invoices/Get", codes.OK, false}, // another method, its own bucket
		{v1, "/shop.Invoices/Get", codes.OK, false},
		{v2, "/shop.Invoices/Get", codes.ResourceExhausted, false},
		{v1Server, "/shop.Orders/List", codes.OK, false}, // no option: one budget over every method
		{v2Server, "/shop.Invoices/List", codes.OK, false},
		{v1Server, "/shop.Auth/Whoami", codes.OK, false},
		{v2Server, "/shop.Orders/Get", codes.ResourceExhausted, false},
		{v1API, "/shop.Orders/List", codes.OK, false}, // one scope over two methods
		{v2API, "/shop.Invoices/List", codes.OK, false},
		{v1API, "/shop.Invoices/List", codes.ResourceExhausted, false},
		{v1Login, "/shop.Auth/Login", codes.OK, false},
		{v2Login, "/shop.Auth/Login", codes.ResourceExhausted, true}, // the lock, set by build 2
		{v1Login, "/shop.Auth/Login", codes.ResourceExhausted, true}, // holds in build 1
		{v2, "/shop.Orders/Get", codes.ResourceExhausted, false},     // no penalty here: no lock
	} {
		ctx := grpc.NewContextWithServerTransportStream(context.Background(), methodStream{method: st.method})
		err := st.l.Limit(ctx)
		if codeOf(err) != st.want {
			t.Errorf("call %d, %s: Limit() = %v, want %v", i+1, st.method, err, st.want)
			continue
		}
		if d, ok := (answer{err: err}).retryDelay(); st.want != codes.OK && (!ok || (d >= 59*time.Minute) != st.locked) {
			t.Errorf("call %d, %s: retry delay %s (present %v), want locked %v", i+1, st.method, d, ok, st.locked)
		}
	}
}

// methodStream is a discardStream whose calls are to method.
type methodStream struct {
	discardStream
	method string
}

func (s methodStream) Method() string { return s.method }

// TestFailureCodes: each failure the policy reports maps to its code and
// fixed message, whatever the error says.
func TestFailureCodes(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		v    policy.Verdict
		code codes.Code
		msg  string
	}{
		{"no key", context.Background(), policy.Verdict{Status: 400, Err: keyfunc.ErrNoKey}, codes.InvalidArgument, msgNoKey},
		{"store", context.Background(), policy.Verdict{Status: 503, Err: core.ErrUnavailable}, codes.Unavailable, msgUnavailable},
		{"store, call ended too", canceled, policy.Verdict{Status: 503, Err: core.ErrUnavailable}, codes.Unavailable, msgUnavailable},
		{"canceled", canceled, policy.Verdict{Status: 503, Err: context.Canceled}, codes.Canceled, msgEnded},
		{"deadline", expired, policy.Verdict{Status: 503, Err: context.DeadlineExceeded}, codes.DeadlineExceeded, msgEnded},
		{"other 503", context.Background(), policy.Verdict{Status: 503, Err: errTest}, codes.Unavailable, msgUnavailable},
		{"misconfigured", context.Background(), policy.Verdict{Status: 500, Err: errTest}, codes.Internal, msgInternal},
	} {
		st, _ := status.FromError(failed(tc.ctx, &tc.v))
		if st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("%s: failed() = %v %q, want %v %q", tc.name, st.Code(), st.Message(), tc.code, tc.msg)
		}
	}
}

func TestNewPanics(t *testing.T) {
	adaptertest.RunPanics(t, "grpclimit", func(lim *core.Limiter, m *adaptertest.Middleware) {
		opts := []Option{WithLimits(m.Limits...), WithHeaders(m.Headers), WithWait(m.Wait)}
		if m.Concurrency != (core.ConcurrencyLimit{}) {
			opts = append(opts, WithConcurrency(m.Concurrency))
		}
		if m.Enforce != 0 {
			opts = append(opts, WithEnforce(m.Enforce))
		}
		if m.Warning != 0 {
			opts = append(opts, WithWarning(m.Warning))
		}
		if m.PathRoot != "" {
			opts = append(opts, WithPath(m.PathRoot, m.Path...))
		}
		if m.Share != nil {
			opts = append(opts, WithShare(m.ShareLevel, *m.Share))
		}
		if m.Shadow != nil {
			opts = append(opts, WithShadowLimits(m.Shadow...))
		}
		New(lim, m.Limit, m.Key, opts...)
	})
	defer func() {
		if v := recover(); v == nil || !strings.HasPrefix(v.(error).Error(), "grpclimit: ") {
			t.Errorf("New with a nil option panicked with %v, want a grpclimit error", v)
		}
	}()
	New(adaptertest.Memory(t), core.PerMinute(1), keyfunc.IP(), nil)
}

// TestBuild: Build returns what New would panic with, as an error, and a
// working Interceptor otherwise.
func TestBuild(t *testing.T) {
	adaptertest.CheckBuild(t, "grpclimit", func(lim *core.Limiter, limit core.Limit, key keyfunc.Func) (bool, error) {
		l, err := Build(lim, limit, key, WithHeaders(policy.HeadersNone))
		return l != nil, err
	})
}

type ctxKey struct{}

// TestRequest: the view of a call reads metadata case-insensitively and
// joins repeated keys, the peer, the full method and context values.
func TestRequest(t *testing.T) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(
		"x-tenant", "acme", "x-forwarded-for", "198.51.100.1", "x-forwarded-for", "198.51.100.2"))
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.7:1234"))})
	ctx = context.WithValue(ctx, ctxKey{}, "from context")
	r := &call{ctx: ctx, method: methodCheck}
	for _, tc := range []struct{ name, got, want string }{
		{"Header(X-Tenant)", r.Header("X-Tenant"), "acme"},
		{"Header(x-tenant)", r.Header("x-tenant"), "acme"},
		{"Header(X-Forwarded-For)", r.Header("X-Forwarded-For"), "198.51.100.1, 198.51.100.2"},
		{"Header(X-Missing)", r.Header("X-Missing"), ""},
		{"RemoteAddr()", r.RemoteAddr(), "203.0.113.7:1234"},
		{"Method()", r.Method(), "POST"},
		{"Route()", r.Route(), methodCheck},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	if got := r.Value(ctxKey{}); got != "from context" {
		t.Errorf("Value(ctxKey{}) = %v, want \"from context\"", got)
	}
	if got := r.Native(); got != ctx {
		t.Errorf("Native() is not the call's context")
	}
	bare := &call{ctx: context.Background()}
	if got := bare.Header("X-Tenant") + bare.RemoteAddr() + bare.Route(); got != "" {
		t.Errorf("the view of a call without metadata, peer or method reports %q, want nothing", got)
	}
}

// BenchmarkUnary measures the unary interceptor around a handler that does
// nothing, on a limiter in memory: the adapter's own cost per call.
func BenchmarkUnary(b *testing.B) {
	lim, err := core.NewMemory()
	if err != nil {
		b.Fatal(err)
	}
	intercept := New(lim, core.PerSecond(1<<30), keyfunc.Join(keyfunc.Tenant("x-tenant"), keyfunc.Route())).Unary()
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "acme"))
	ctx = grpc.NewContextWithServerTransportStream(ctx, discardStream{})
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := intercept(ctx, nil, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}

// discardStream is a grpc.ServerTransportStream that drops what it is
// given.
type discardStream struct{}

func (discardStream) Method() string               { return methodCheck }
func (discardStream) SetHeader(metadata.MD) error  { return nil }
func (discardStream) SendHeader(metadata.MD) error { return nil }
func (discardStream) SetTrailer(metadata.MD) error { return nil }

// TestDenyList: a call whose address is on a deny list fails with
// PermissionDenied and a fixed message, without reaching the service;
// others go on.
func TestDenyList(t *testing.T) {
	s := serve(t, New(adaptertest.Memory(t), core.PerMinute(10), keyfunc.IP(), WithDeny("203.0.113.0/24")))
	a := check(t, s.dial("203.0.113.7:5000"))
	if a.code != codes.PermissionDenied || a.msg != msgDenyList {
		t.Errorf("a listed client: %v, want PermissionDenied %q", a.err, msgDenyList)
	}
	if a := check(t, s.dial("198.51.100.7:5000")); a.code != codes.OK {
		t.Errorf("another client: %v, want OK", a.err)
	}
	if got := s.handled.Load(); got != 1 {
		t.Errorf("%d calls reached the service, want 1", got)
	}
}

// TestSharedLevel: on a real Redis, a path whose root is shared with
// classes (WithShare, WithClass): calls of the last class (no priority
// in their metadata) are refused with ResourceExhausted once they would
// spend the reserve the critical class holds, half the root's burst,
// though the root's bucket still has tokens.
func TestSharedLevel(t *testing.T) {
	lim, _ := redisLimiter(t)
	s := serve(t, New(lim, core.PerMinute(10), keyfunc.Static("upstream"),
		WithPath("upstream", policy.PathLevel{Name: "peer", Key: keyfunc.IP(), Limits: []core.Limit{core.PerMinute(100)}}),
		WithShare("upstream", core.Share{Classes: []core.Class{{Name: "critical", Reserve: 0.5}, {Name: "rest"}}}),
		WithClass(func(r keyfunc.Request) (string, error) { return r.Header("x-priority"), nil })))
	c := s.dial("203.0.113.7:5000")
	for i := range 6 {
		a := check(t, c)
		want := codes.OK
		if i == 5 {
			want = codes.ResourceExhausted
		}
		if a.code != want {
			t.Fatalf("call %d: %v, want %v", i+1, a.err, want)
		}
	}
	if got := s.handled.Load(); got != 5 {
		t.Errorf("%d calls reached the service, want 5 (the other five tokens are the critical class's)", got)
	}
}
