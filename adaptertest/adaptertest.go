package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
)

// OK is the body, sent as plain text with status 200, of every route
// handler a [Build] registers.
const OK = "ok"

// DefaultRemoteAddr is the peer address of a [Request] that names none.
const DefaultRemoteAddr = "192.0.2.10:40000"

// Build turns app into the framework's router, in memory, and returns how
// to send it requests. It reports setup failures with tb.Fatal.
type Build func(tb testing.TB, app App) Serve

// Serve sends one request through the router and returns its answer. [Run]
// calls it from the test's goroutine, one request at a time;
// [CheckConcurrency] calls it from several goroutines at once, which the
// Serve of [ServeHTTP] allows.
type Serve func(Request) Response

// App is a router to build: one limiter shared by every middleware, an
// optional app-wide middleware, and routes.
type App struct {
	// Limiter is the engine every middleware of the app uses.
	Limiter *core.Limiter
	// Use, when not nil, is registered for the whole app the framework's
	// usual way (for example gin's Engine.Use, or wrapping a ServeMux).
	Use *Middleware
	// Routes are the app's routes, each answering [OK].
	Routes []Route
}

// Route is one route of an [App].
type Route struct {
	// Method is the route's method, such as "GET".
	Method string
	// Pattern is the route's path pattern in net/http syntax without the
	// method, with named parameters in braces: "/items/{id}".
	Pattern string
	// Middleware, when not nil, limits this route only.
	Middleware *Middleware
	// Handler, when not nil, is called by the route's handler, with the
	// request as the middleware's options see it, before it answers [OK]
	// with the status [Answer] gives.
	// It may block, and it may panic: the builder then recovers outside
	// the middleware, as the framework's recover middleware does, and
	// answers 500 (see [CheckConcurrency]).
	Handler func(Call)
}

// ColonPattern returns the route's pattern with parameters written as
// ":name", as gin, echo and fiber spell them: "/items/{id}" becomes
// "/items/:id".
func (r Route) ColonPattern() string {
	var b strings.Builder
	for p := r.Pattern; p != ""; {
		i := strings.IndexByte(p, '{')
		j := strings.IndexByte(p, '}')
		if i < 0 || j < i {
			b.WriteString(p)
			break
		}
		b.WriteString(p[:i])
		b.WriteByte(':')
		b.WriteString(p[i+1 : j])
		p = p[j+1:]
	}
	return b.String()
}

// Middleware describes one rate-limiting middleware in neutral terms. Limit
// and Key are the adapter's New arguments; every other field maps to the
// adapter option of the same name, and its zero value means "do not pass
// the option".
type Middleware struct {
	Limit core.Limit
	Key   keyfunc.Func
	// Param, when set, replaces Key: the builder keys requests by the
	// named path parameter, read with the adapter's native key function
	// (Key over the framework's request), as "param:<value>".
	Param string

	Skip        func(Call) bool
	Cost        func(Call) int
	LimitFunc   func(Call) (core.Limit, error)
	Limits      []core.Limit
	Headers     policy.HeaderStyle
	DryRun      bool
	Wait        time.Duration
	ProblemJSON bool
	Scope       string
	// PerRoute maps to WithPerRoute(true); Route to WithRoute.
	PerRoute bool
	Route    string
	// Penalty maps to WithPenalty.
	Penalty time.Duration
	// Concurrency maps to WithConcurrency; its zero value means "do not
	// pass the option".
	Concurrency core.ConcurrencyLimit
	// ChargeIf maps to WithChargeIf.
	ChargeIf func(status int) bool
	// FinalCost maps to WithFinalCost.
	FinalCost func(Call, policy.Response) int
	// AllowEntries maps to WithAllow, DenyEntries to WithDeny (Deny is
	// the deny handler), ListClientIP to WithListClientIP.
	AllowEntries, DenyEntries []string
	ListClientIP              []keyfunc.IPOption
	// Overrides, when not nil, returns the override set WithOverrides
	// gets, made on the scenario's limiter (so called after it).
	Overrides func() *overrides.Set
	// PathRoot and Path map to WithPath; an empty PathRoot means "do not
	// pass the option".
	PathRoot string
	Path     []policy.PathLevel
	// Share and ShareLevel map to WithShare, when Share is not nil; Class
	// to WithClass.
	Share      *core.Share
	ShareLevel string
	Class      keyfunc.Func
	// Enforce maps to WithEnforce; zero means "do not pass the option"
	// (a canary enforcing no key is a dry run: DryRun).
	Enforce float64
	// DryRunReport maps to WithDryRunHandler.
	DryRunReport func(Call, policy.DryRunReport)
	// Warning maps to WithWarning; zero means "do not pass the option".
	Warning float64
	// Shadow maps to WithShadowLimits; nil means "do not pass the
	// option".
	Shadow []core.Limit

	// Deny, when not nil, is the deny handler: the builder's native deny
	// handler writes the Reply it returns for the handler's core.Result.
	Deny func(core.Result) Reply
	// Error, when not nil, is the error handler: the builder's native error
	// handler writes the Reply it returns for the handler's error.
	Error func(error) Reply
}

// Call is what the neutral option functions of a [Middleware] see of a
// request. The builder fills it from the framework's native request, so
// that the options exercise the adapter's native types.
type Call struct {
	Method string
	// Path is the URL path as received, such as "/items/7".
	Path string
	// Header returns the named request header field, "" when absent.
	Header func(name string) string
	// Context is the request's context as the route's handler sees it,
	// through which it records a cost with [policy.SetCost]; the option
	// functions see the context the middleware got.
	Context context.Context
}

// Reply is an answer written by a neutral deny or error handler.
type Reply struct {
	Status      int
	ContentType string
	Body        string
}

// Request is one request a scenario sends.
type Request struct {
	// Method defaults to "GET".
	Method string
	// Path is the request target, such as "/items/7".
	Path   string
	Header http.Header
	// RemoteAddr is the connection's peer, "host:port"; it defaults to
	// DefaultRemoteAddr.
	RemoteAddr string
	// Context is the request's context, which the adapter must pass to the
	// policy; nil means context.Background().
	Context context.Context
}

// Response is the answer to a [Request].
type Response struct {
	Status int
	Header http.Header
	Body   string
}

// ServeHTTP returns a Serve that sends requests through h with
// net/http/httptest, for frameworks built on net/http.
func ServeHTTP(h http.Handler) Serve {
	return func(r Request) Response {
		ctx := r.Context
		if ctx == nil {
			ctx = context.Background()
		}
		req := httptest.NewRequestWithContext(ctx, r.Method, r.Path, nil)
		req.RemoteAddr = r.RemoteAddr
		for name, vals := range r.Header {
			req.Header[http.CanonicalHeaderKey(name)] = vals
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return Response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.String()}
	}
}

// Scenario is one conformance case: an app on a fresh limiter, and the
// requests sent to it in order with the answer each must get.
type Scenario struct {
	Name string
	// Limiter makes the scenario's limiter.
	Limiter func(testing.TB) *core.Limiter
	Use     *Middleware
	Routes  []Route
	Steps   []Step
}

// Step is one request and the answer it must get.
type Step struct {
	Request Request
	// HangUp makes the client give up as soon as the request is sent: its
	// context is cancelled concurrently, while the middleware may already
	// be waiting (see Middleware.Wait).
	HangUp bool
	Want   Want
	// Check, when not nil, is called after the response is checked: it
	// returns what is wrong with the state the scenario's own functions
	// recorded (a dry-run handler's reports, say), or nil.
	Check func() error
}

// Want is what a response must be. Zero fields are not checked, except
// that no response may ever carry an error's text.
type Want struct {
	Status int
	// Header lists fields and their exact values.
	Header map[string]string
	// Absent lists fields that must not be set.
	Absent []string
	// ContentType is the exact Content-Type.
	ContentType string
	// Body is the exact body.
	Body string
}

// Run runs every scenario of [Scenarios] as a subtest of t against the
// adapter that build makes, and then a rolling deploy: two builds of one
// service, their routes registered in different orders, serving
// alternately on one real Redis ([redistest.Addr]; skipped without one,
// except under CI), must count in the same buckets and share a penalty
// lock.
func Run(t *testing.T, build Build) {
	t.Helper()
	for _, sc := range Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			app := App{Limiter: sc.Limiter(t), Use: sc.Use, Routes: sc.Routes}
			serve := build(t, app)
			for i, st := range sc.Steps {
				check(t, i+1, st, do(serve, st))
				if st.Check != nil {
					if err := st.Check(); err != nil {
						t.Errorf("step %d: %s: %v", i+1, st.Request.Path, err)
					}
				}
			}
		})
	}
	t.Run("two identical middlewares on two routes count apart or are logged", func(t *testing.T) { checkTwins(t, build) })
	t.Run("rolling deploy", func(t *testing.T) { checkRollingDeploy(t, build) })
}

// do sends st's request with its defaults filled in.
func do(serve Serve, st Step) Response {
	r := st.Request
	if r.Method == "" {
		r.Method = http.MethodGet
	}
	if r.RemoteAddr == "" {
		r.RemoteAddr = DefaultRemoteAddr
	}
	if r.Context == nil {
		r.Context = context.Background()
	}
	if st.HangUp {
		ctx, cancel := context.WithCancel(r.Context)
		defer cancel()
		r.Context = ctx
		go cancel()
	}
	return serve(r)
}

// errorTexts are the beginnings of sluice's error messages, which must
// never reach a client.
var errorTexts = []string{"core:", "keyfunc:", "sluice:"}

func check(t *testing.T, step int, st Step, got Response) {
	t.Helper()
	method := st.Request.Method
	if method == "" {
		method = http.MethodGet
	}
	req := fmt.Sprintf("step %d: %s %s", step, method, st.Request.Path)
	w := st.Want
	if w.Status != 0 && got.Status != w.Status {
		t.Errorf("%s: status = %d, want %d (body %q)", req, got.Status, w.Status, got.Body)
	}
	for name, want := range w.Header {
		if v := got.Header.Get(name); v != want {
			t.Errorf("%s: header %s = %q, want %q", req, name, v, want)
		}
	}
	for _, name := range w.Absent {
		if v := got.Header.Values(name); len(v) != 0 {
			t.Errorf("%s: header %s = %q, want it absent", req, name, v)
		}
	}
	if w.ContentType != "" {
		if v := got.Header.Get("Content-Type"); v != w.ContentType {
			t.Errorf("%s: Content-Type = %q, want %q", req, v, w.ContentType)
		}
	}
	if w.Body != "" && got.Body != w.Body {
		t.Errorf("%s: body = %q, want %q", req, got.Body, w.Body)
	}
	for _, s := range errorTexts {
		if strings.Contains(got.Body, s) {
			t.Errorf("%s: body = %q, which shows an error's text", req, got.Body)
		}
	}
}

// CheckDefaultScope checks the default scope of two middlewares made apart
// by two calls of the adapter's New, with no option, the same limit (one
// request a minute) and the same key function (one static key), each on a
// route of its own, GET /a and GET /b: they either keep apart buckets, or
// they share one and one warning on the limiter's log names both routes
// and the fix (WithScope or WithPerRoute). serve must build that router on
// lim and return how to send it requests.
func CheckDefaultScope(t *testing.T, serve func(lim *core.Limiter) Serve) {
	t.Helper()
	lim, log := Logged(t)
	do := serve(lim)
	for i, st := range []struct {
		path string
		want int
	}{{"/a", 200}, {"/a", 429}} {
		if got := do(get(st.path)).Status; got != st.want {
			t.Errorf("request %d, GET %s: status %d, want %d", i+1, st.path, got, st.want)
		}
	}
	if got := do(get("/b")).Status; got == 200 {
		return // apart
	}
	checkSharedLogged(t, log, "GET /a", "GET /b")
}

// checkSharedLogged checks that log holds one warning that two middlewares
// share a budget, naming the routes first and second and the fix.
func checkSharedLogged(t *testing.T, log *Log, first, second string) {
	t.Helper()
	said := log.Matching("share one budget")
	if len(said) != 1 {
		t.Errorf("two middlewares on %s and %s share a budget; log %q, want one line naming both", first, second, log.Lines())
		return
	}
	for _, want := range []string{first, second, "WithScope", "WithPerRoute(true)"} {
		if !strings.Contains(said[0], want) {
			t.Errorf("log line %q does not name %q", said[0], want)
		}
	}
}

// CheckBuild checks an adapter's Build: it returns what New would panic
// with as an error prefixed with the package's name (a zero limit wraps
// core.ErrInvalidLimit; a nil key function fails), and a middleware
// otherwise. build calls the adapter's Build with its arguments (and any
// option) and reports whether the middleware it returned is not nil.
func CheckBuild(t *testing.T, pkg string, build func(*core.Limiter, core.Limit, keyfunc.Func) (bool, error)) {
	t.Helper()
	lim := Memory(t)
	if _, err := build(lim, core.Limit{}, keyfunc.IP()); !errors.Is(err, core.ErrInvalidLimit) || !strings.HasPrefix(err.Error(), pkg+": ") {
		t.Errorf("Build with a zero limit: %v, want a %s: error wrapping ErrInvalidLimit", err, pkg)
	}
	if _, err := build(lim, core.PerMinute(1), nil); err == nil {
		t.Error("Build with a nil key function: no error")
	}
	if ok, err := build(lim, core.PerMinute(1), keyfunc.IP()); err != nil || !ok {
		t.Errorf("Build = non-nil middleware %v, error %v", ok, err)
	}
}

// Options returns the shared options m describes, as policy options for
// an adapter whose framework passes requests as C (H is the adapter's own
// settings type): every field of m but Limit, Key, Param, Deny and Error,
// which involve the adapter's own API. call turns the framework's request
// into the Call m's functions see. An adapter's tests append its deny and
// error handlers and pass the result to the adapter's New.
func Options[C, H any](m *Middleware, call func(C) Call) []policy.Option[C, H] {
	opts := []policy.Option[C, H]{
		policy.WithLimits[C, H](m.Limits...), policy.WithHeaders[C, H](m.Headers),
		policy.WithDryRun[C, H](m.DryRun), policy.WithWait[C, H](m.Wait), policy.WithProblemJSON[C, H](m.ProblemJSON),
	}
	if m.Scope != "" {
		opts = append(opts, policy.WithScope[C, H](m.Scope))
	}
	if m.PerRoute {
		opts = append(opts, policy.WithPerRoute[C, H](true))
	}
	if m.Route != "" {
		opts = append(opts, policy.WithRoute[C, H](m.Route))
	}
	if m.Penalty != 0 {
		opts = append(opts, policy.WithPenalty[C, H](m.Penalty))
	}
	if m.Concurrency != (core.ConcurrencyLimit{}) {
		opts = append(opts, policy.WithConcurrency[C, H](m.Concurrency))
	}
	if m.Skip != nil {
		opts = append(opts, policy.WithSkip[C, H](func(c C) bool { return m.Skip(call(c)) }))
	}
	if m.Cost != nil {
		opts = append(opts, policy.WithCost[C, H](func(c C) int { return m.Cost(call(c)) }))
	}
	if m.LimitFunc != nil {
		opts = append(opts, policy.WithLimitFunc[C, H](func(c C) (core.Limit, error) { return m.LimitFunc(call(c)) }))
	}
	if m.ChargeIf != nil {
		opts = append(opts, policy.WithChargeIf[C, H](m.ChargeIf))
	}
	if m.FinalCost != nil {
		opts = append(opts, policy.WithFinalCost[C, H](func(c C, r policy.Response) int { return m.FinalCost(call(c), r) }))
	}
	if m.AllowEntries != nil {
		opts = append(opts, policy.WithAllow[C, H](m.AllowEntries...))
	}
	if m.DenyEntries != nil {
		opts = append(opts, policy.WithDeny[C, H](m.DenyEntries...))
	}
	if m.ListClientIP != nil {
		opts = append(opts, policy.WithListClientIP[C, H](m.ListClientIP...))
	}
	if m.Overrides != nil {
		opts = append(opts, policy.WithOverrides[C, H](m.Overrides()))
	}
	if m.PathRoot != "" {
		opts = append(opts, policy.WithPath[C, H](m.PathRoot, m.Path...))
	}
	if m.Share != nil {
		opts = append(opts, policy.WithShare[C, H](m.ShareLevel, *m.Share))
	}
	if m.Class != nil {
		opts = append(opts, policy.WithClass[C, H](m.Class))
	}
	if m.Enforce != 0 {
		opts = append(opts, policy.WithEnforce[C, H](m.Enforce))
	}
	if m.DryRunReport != nil {
		opts = append(opts, policy.WithDryRunHandler[C, H](func(c C, rep policy.DryRunReport) { m.DryRunReport(call(c), rep) }))
	}
	if m.Warning != 0 {
		opts = append(opts, policy.WithWarning[C, H](m.Warning))
	}
	if m.Shadow != nil {
		opts = append(opts, policy.WithShadowLimits[C, H](m.Shadow...))
	}
	return opts
}
