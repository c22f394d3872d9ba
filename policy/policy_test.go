package policy

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// The tests' middleware takes the request view itself as its native
// request, and has no adapter settings.
type (
	req = keyfunc.Request
	opt = Option[req, struct{}]
)

func self(r keyfunc.Request) keyfunc.Request { return r }

// fakeReq is a keyfunc.Request for policy tests.
type fakeReq struct {
	headers map[string]string
	route   string
	method  string // "" for GET
}

func (r fakeReq) Header(name string) string { return r.headers[name] }
func (r fakeReq) RemoteAddr() string        { return "192.0.2.1:1234" }
func (r fakeReq) Method() string {
	if r.method == "" {
		return "GET"
	}
	return r.method
}
func (r fakeReq) Route() string { return r.route }
func (r fakeReq) Value(any) any { return nil }

func headersOf(v Verdict) map[string]string {
	h := map[string]string{}
	v.Headers(func(k, val string) { h[k] = val })
	return h
}

// newTestPolicy builds a policy on an in-memory limiter. The tests run
// on the real clock: each makes its requests within microseconds, far from
// the whole seconds the header fields are rounded to.
func newTestPolicy(t *testing.T, limit core.Limit, key keyfunc.Func, opts ...opt) *Policy {
	t.Helper()
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := New(lim, limit, key, self, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicyHeaders(t *testing.T) {
	limit := core.Limit{Name: "api", Rate: 2, Period: 3 * time.Second, Burst: 2}
	tests := []struct {
		name  string
		style HeaderStyle
		want  []map[string]string // per request: allowed, allowed, denied
	}{
		{"legacy", HeadersLegacy, []map[string]string{
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "2"},
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "3"},
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "3", "Retry-After": "2"},
		}},
		{"ietf", HeadersIETF, []map[string]string{
			{"RateLimit-Policy": `"api";q=2;w=3`, "RateLimit": `"api";r=1;t=2`},
			{"RateLimit-Policy": `"api";q=2;w=3`, "RateLimit": `"api";r=0;t=2`},
			{"RateLimit-Policy": `"api";q=2;w=3`, "RateLimit": `"api";r=0;t=2`, "Retry-After": "2"},
		}},
		{"none", HeadersNone, []map[string]string{{}, {}, {"Retry-After": "2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestPolicy(t, limit, keyfunc.Static("x"), WithHeaders[req, struct{}](tt.style))
			for i, want := range tt.want {
				v := p.Decide(context.Background(), fakeReq{})
				if got := headersOf(v); !maps.Equal(got, want) {
					t.Fatalf("request %d: headers %v, want %v", i, got, want)
				}
			}
		})
	}
}

func TestPolicyVerdicts(t *testing.T) {
	ctx := context.Background()
	t.Run("deny body and status", func(t *testing.T) {
		p := newTestPolicy(t, core.PerMinute(1), keyfunc.Static("x"))
		p.Decide(ctx, fakeReq{})
		v := p.Decide(ctx, fakeReq{})
		ct, body := v.Body()
		if v.Action != Deny || v.Status != 429 || ct != "text/plain; charset=utf-8" || string(body) != "Too Many Requests\n" {
			t.Fatalf("Decide = %+v, body %q %q", v, ct, body)
		}
	})
	t.Run("problem json", func(t *testing.T) {
		p := newTestPolicy(t, core.PerMinute(1), keyfunc.Static("x"), WithProblemJSON[req, struct{}](true))
		p.Decide(ctx, fakeReq{})
		v := p.Decide(ctx, fakeReq{})
		ct, body := v.Body()
		want := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Rate limit exceeded; retry after 60 s.","violated-policies":["1/m"]}`
		if ct != "application/problem+json" || string(body) != want {
			t.Fatalf("Body() = %q, %s", ct, body)
		}
	})
	t.Run("missing key is 400, never a pass", func(t *testing.T) {
		p := newTestPolicy(t, core.PerMinute(1), keyfunc.Tenant("X-Tenant"))
		v := p.Decide(ctx, fakeReq{})
		if v.Action != Fail || v.Status != 400 || !errors.Is(v.Err, keyfunc.ErrNoKey) {
			t.Fatalf("Decide = %+v", v)
		}
		if _, body := v.Body(); strings.Contains(string(body), "X-Tenant") {
			t.Fatalf("body leaks the error: %s", body)
		}
	})
	t.Run("an empty key from a custom key function is 400", func(t *testing.T) {
		empty := func(keyfunc.Request) (string, error) { return "", nil }
		p := newTestPolicy(t, core.PerMinute(1), empty)
		if v := p.Decide(ctx, fakeReq{}); v.Action != Fail || v.Status != 400 || !errors.Is(v.Err, keyfunc.ErrNoKey) {
			t.Fatalf("Decide = %+v", v)
		}
	})
	t.Run("cost above burst is 500", func(t *testing.T) {
		p := newTestPolicy(t, core.PerMinute(2), keyfunc.Static("x"), WithCost[req, struct{}](func(keyfunc.Request) int { return 3 }))
		if v := p.Decide(ctx, fakeReq{}); v.Action != Fail || v.Status != 500 || !errors.Is(v.Err, core.ErrInvalidLimit) {
			t.Fatalf("Decide = %+v", v)
		}
	})
	t.Run("skip", func(t *testing.T) {
		p := newTestPolicy(t, core.PerMinute(1), keyfunc.Static("x"), WithSkip[req, struct{}](func(r keyfunc.Request) bool { return r.Route() == "/healthz" }))
		for range 3 {
			v := p.Decide(ctx, fakeReq{route: "/healthz"})
			if v.Action != Continue || len(headersOf(v)) != 0 {
				t.Fatalf("skipped Decide = %+v", v)
			}
		}
	})
	t.Run("dry run", func(t *testing.T) {
		p := newTestPolicy(t, core.PerMinute(1), keyfunc.Static("x"), WithDryRun[req, struct{}](true))
		p.Decide(ctx, fakeReq{})
		v := p.Decide(ctx, fakeReq{})
		if v.Action != Continue || v.Result.Allowed || !v.Result.DryRun || len(headersOf(v)) != 0 {
			t.Fatalf("dry-run Decide = %+v, headers %v; want Continue, a would-be denial marked DryRun, no fields", v, headersOf(v))
		}
	})
	t.Run("limit per request with extra limit", func(t *testing.T) {
		plans := map[string]core.Limit{"free": core.PerMinute(1), "pro": core.PerMinute(3)}
		p := newTestPolicy(t, core.PerMinute(1), keyfunc.Tenant("X-Tenant"),
			WithLimitFunc[req, struct{}](func(r keyfunc.Request) (core.Limit, error) {
				l, ok := plans[r.Header("X-Plan")]
				if !ok {
					return core.Limit{}, keyfunc.ErrNoKey
				}
				return l, nil
			}),
			WithLimits[req, struct{}](core.PerHour(100)))
		count := func(tenant, plan string) int {
			n := 0
			for range 5 {
				if v := p.Decide(ctx, fakeReq{headers: map[string]string{"X-Tenant": tenant, "X-Plan": plan}}); v.Action == Continue {
					n++
				}
			}
			return n
		}
		if got := count("a", "free"); got != 1 {
			t.Fatalf("free plan admitted %d, want 1", got)
		}
		if got := count("b", "pro"); got != 3 {
			t.Fatalf("pro plan admitted %d, want 3", got)
		}
		if v := p.Decide(ctx, fakeReq{headers: map[string]string{"X-Tenant": "c", "X-Plan": "gold"}}); v.Status != 400 {
			t.Fatalf("unknown plan: %+v", v)
		}
	})
	t.Run("invalid setup", func(t *testing.T) {
		lim, _ := core.NewMemory()
		if _, _, err := New(lim, core.PerMinute(1), keyfunc.IP(), self, opt(nil)); err == nil || !strings.Contains(err.Error(), "option 0 is nil") {
			t.Fatalf("nil option: %v", err)
		}
		if _, _, err := New[req, struct{}](nil, core.PerMinute(1), keyfunc.IP(), self); err == nil {
			t.Fatal("nil limiter accepted")
		}
		if _, _, err := New[req, struct{}](lim, core.PerMinute(1), nil, self); err == nil {
			t.Fatal("nil key accepted")
		}
		if _, _, err := New[req, struct{}](lim, core.Limit{}, keyfunc.IP(), self); !errors.Is(err, core.ErrInvalidLimit) {
			t.Fatalf("zero limit: %v", err)
		}
		if _, _, err := New[req, struct{}](lim, core.PerMinute(1), keyfunc.IP(), self, WithWait[req, struct{}](-time.Second)); err == nil {
			t.Fatal("negative wait accepted")
		}
	})
}

// lines is a slog.Handler that keeps each record as text.
type lines struct {
	mu  sync.Mutex
	got []string
}

func (h *lines) Enabled(context.Context, slog.Level) bool { return true }
func (h *lines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	h.mu.Lock()
	h.got = append(h.got, b.String())
	h.mu.Unlock()
	return nil
}
func (h *lines) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lines) WithGroup(string) slog.Handler      { return h }

// TestMisconfigurationLoggedOnce: a failure that repeats on every request
// (a route key where the route is not known, a bad cost, a failing limit
// function) is logged once with its fix, and the problem detail says why;
// store failures and the client's own cancellations are not logged here.
func TestMisconfigurationLoggedOnce(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		key    keyfunc.Func
		opts   []opt
		status int
		detail string
		fix    string
	}{
		{"route key outside the router", keyfunc.Route(), nil, 400,
			"The rate limiter cannot see this request's route.", "attach it to the route itself"},
		{"cost of 0", keyfunc.Static("x"), []opt{WithCost[req, struct{}](func(req) int { return 0 })}, 500,
			"The rate limiter is misconfigured.", "WithCost must return a cost from 1"},
		{"limit function error", keyfunc.Static("x"), []opt{WithLimitFunc[req, struct{}](func(req) (core.Limit, error) {
			return core.Limit{}, errors.New("plan lookup failed")
		})}, 500, "The rate limiter is misconfigured.", "WithLimitFunc returned an error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &lines{}
			lim, err := core.NewMemory(core.WithLogger(slog.New(log)))
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := New(lim, core.PerMinute(10), tc.key, self, append(tc.opts, WithProblemJSON[req, struct{}](true))...)
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				v := p.Decide(ctx, fakeReq{})
				_, body := v.Body()
				if v.Action != Fail || v.Status != tc.status || !strings.Contains(string(body), `"detail":"`+tc.detail+`"`) {
					t.Fatalf("Decide = %+v, body %s; want %d with detail %q", v, body, tc.status, tc.detail)
				}
			}
			if len(log.got) != 1 || !strings.Contains(log.got[0], tc.fix) {
				t.Errorf("logged %q; want one line naming the fix %q", log.got, tc.fix)
			}
		})
	}
}

// TestNativeKey: a key function over a framework's request reads it from a
// view that offers it, and fails on a view of another framework.
func TestNativeKey(t *testing.T) {
	key := NativeKey(func(c *frameworkCtx) (string, error) { return "item:" + c.param, nil })
	if got, err := key(nativeReq{c: &frameworkCtx{param: "7"}}); err != nil || got != "item:7" {
		t.Errorf("key = %q, %v; want item:7", got, err)
	}
	if got, err := key(fakeReq{}); err == nil || errors.Is(err, keyfunc.ErrNoKey) {
		t.Errorf("key on a foreign view = %q, %v; want an error other than ErrNoKey", got, err)
	}
}

// frameworkCtx stands for a framework's own request type.
type frameworkCtx struct{ param string }

// nativeReq is an adapter's view of a frameworkCtx.
type nativeReq struct {
	fakeReq
	c *frameworkCtx
}

func (r nativeReq) Native() *frameworkCtx { return r.c }
