package fiberv3limit

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/gofiber/fiber/v3"
	fiberrecover "github.com/gofiber/fiber/v3/middleware/recover"
	"github.com/sluicehq/sluice/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
	"github.com/valyala/fasthttp"
)

func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(tb testing.TB, app adaptertest.App) adaptertest.Serve {
		return build(tb, app, fiber.New(config))
	})
}

// TestConformanceCustomCtx runs the table on an app whose context is a
// type of its own, which the middleware sees through the fiber.Ctx
// interface.
func TestConformanceCustomCtx(t *testing.T) {
	adaptertest.Run(t, func(tb testing.TB, app adaptertest.App) adaptertest.Serve {
		return build(tb, app, newCustomApp())
	})
}

func TestConcurrency(t *testing.T) {
	adaptertest.CheckConcurrency(t, func(tb testing.TB, app adaptertest.App) adaptertest.Serve {
		return build(tb, app, fiber.New(config))
	})
}

func TestNewPanics(t *testing.T) {
	adaptertest.RunPanics(t, "fiberv3limit", func(lim *core.Limiter, m *adaptertest.Middleware) { middleware(lim, m) })
}

// config answers the middleware's errors (a 429, or a failure) with the
// status text as plain text, the answer every adapter gives by default, so
// that the table checks that they reach the app's ErrorHandler with the
// right status and with the rate-limit fields still on the response.
var config = fiber.Config{ErrorHandler: func(c fiber.Ctx, err error) error {
	code := fiber.StatusInternalServerError
	if fe, ok := err.(*fiber.Error); ok {
		code = fe.Code
	}
	c.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
	return c.Status(code).SendString(http.StatusText(code) + "\n")
}}

// customCtx is an app's own context type (see fiber.NewWithCustomCtx).
type customCtx struct{ *fiber.DefaultCtx }

func newCustomApp() *fiber.App {
	return fiber.NewWithCustomCtx(func(app *fiber.App) fiber.CustomCtx {
		return &customCtx{fiber.NewDefaultCtx(app)}
	}, config)
}

// userContext is the fasthttp user value under which serve hands the test
// request's context to the app.
type userContext struct{}

// build serves app with f: app.Use through App.Use, route middlewares in
// their route's handlers.
//
// Requests go straight to the app's fasthttp handler on a RequestCtx made
// with Init, which sets the peer address; App.Test would report 0.0.0.0 for
// every request. fiber has no request context of its own, so a first
// handler sets the context from the test request, as an app's timeout
// middleware would.
func build(tb testing.TB, app adaptertest.App, f *fiber.App) adaptertest.Serve {
	f.Use(fiberrecover.New()) // a panic answers 500, through the ErrorHandler
	f.Use(func(c fiber.Ctx) error {
		if ctx, ok := c.RequestCtx().UserValue(userContext{}).(context.Context); ok {
			c.SetContext(ctx)
		}
		return c.Next()
	})
	if app.Use != nil {
		f.Use(middleware(app.Limiter, app.Use))
	}
	for _, rt := range app.Routes {
		ok := func(c fiber.Ctx) error {
			if rt.Handler != nil {
				rt.Handler(call(c))
			}
			status, asError := adaptertest.Answer(call(c))
			if asError {
				return fiber.NewError(status)
			}
			c.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
			return c.Status(status).SendString(adaptertest.OK)
		}
		if rt.Middleware != nil {
			f.Add([]string{rt.Method}, rt.ColonPattern(), middleware(app.Limiter, rt.Middleware), ok)
		} else {
			f.Add([]string{rt.Method}, rt.ColonPattern(), ok)
		}
	}
	h := f.Handler()
	return func(r adaptertest.Request) adaptertest.Response {
		fctx := newCtx(tb, r.Method, r.Path, r.RemoteAddr, r.Header)
		fctx.SetUserValue(userContext{}, r.Context)
		h(fctx)
		res := adaptertest.Response{Status: fctx.Response.StatusCode(), Header: http.Header{}, Body: string(fctx.Response.Body())}
		for k, v := range fctx.Response.Header.All() {
			res.Header.Add(string(k), string(v))
		}
		return res
	}
}

// newCtx returns a fasthttp request context for a request from peer.
func newCtx(tb testing.TB, method, path, peer string, header http.Header) *fasthttp.RequestCtx {
	tb.Helper()
	addr, err := netip.ParseAddrPort(peer)
	if err != nil {
		tb.Fatalf("netip.ParseAddrPort(%q) = %v", peer, err)
	}
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	for name, vals := range header {
		for _, v := range vals {
			req.Header.Add(name, v)
		}
	}
	fctx := new(fasthttp.RequestCtx)
	fctx.Init(&req, net.TCPAddrFromAddrPort(addr), nil)
	return fctx
}

// call is the neutral view of a request.
func call(c fiber.Ctx) adaptertest.Call {
	return adaptertest.Call{Method: c.Method(), Path: c.Path(), Header: func(name string) string { return c.Get(name) }, Context: c.Context()}
}

// middleware translates a neutral middleware into New and its options.
func middleware(lim *core.Limiter, m *adaptertest.Middleware) fiber.Handler {
	reply := func(c fiber.Ctx, rep adaptertest.Reply) error {
		c.Set(fiber.HeaderContentType, rep.ContentType)
		return c.Status(rep.Status).SendString(rep.Body)
	}
	opts := adaptertest.Options[fiber.Ctx, Handlers](m, call)
	if m.Deny != nil {
		opts = append(opts, WithDenyHandler(func(c fiber.Ctx, res core.Result) error { return reply(c, m.Deny(res)) }))
	}
	if m.Error != nil {
		opts = append(opts, WithErrorHandler(func(c fiber.Ctx, err error) error { return reply(c, m.Error(err)) }))
	}
	key := m.Key
	if m.Param != "" {
		key = Key(func(c fiber.Ctx) (string, error) { return "param:" + c.Params(m.Param), nil })
	}
	return New(lim, m.Limit, key, opts...)
}

// TestDenialReachesErrorHandler: an app whose ErrorHandler answers JSON
// gets the 429 as a *fiber.Error, with Retry-After and the rate-limit
// fields already on the response.
func TestDenialReachesErrorHandler(t *testing.T) {
	lim := adaptertest.Memory(t)
	var seen *fiber.Error
	f := fiber.New(fiber.Config{ErrorHandler: func(c fiber.Ctx, err error) error {
		seen, _ = err.(*fiber.Error)
		return c.Status(fiber.StatusTeapot).JSON(fiber.Map{"error": "slow down"})
	}})
	f.Get("/", New(lim, core.PerMinute(1), keyfunc.Static("all")), hello)
	for i, want := range []int{200, fiber.StatusTeapot} {
		res, err := f.Test(httptest.NewRequest(http.MethodGet, "/", nil))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, res.StatusCode, want)
		}
		if i == 1 {
			if seen == nil || seen.Code != 429 {
				t.Fatalf("the error handler saw %v, want a *fiber.Error with code 429", seen)
			}
			if res.Header.Get("Retry-After") != "60" || res.Header.Get("X-Ratelimit-Remaining") != "0" || res.Header.Get("Content-Type") != "application/json; charset=utf-8" {
				t.Fatalf("429 headers %v", res.Header)
			}
		}
	}
}

type ctxKey struct{}

// inHandler runs check in a Use handler (use is true) and then in the route
// handler of "/items/:id", for the request vr, on f.
func inHandler(t *testing.T, f *fiber.App, vr adaptertest.Request, check func(c fiber.Ctx, use bool)) {
	t.Helper()
	ran := 0
	f.Use(func(c fiber.Ctx) error {
		c.Locals("user", "from locals")
		c.SetContext(context.WithValue(context.Background(), ctxKey{}, "from context"))
		check(c, true)
		ran++
		return c.Next()
	})
	f.Get("/items/:id", func(c fiber.Ctx) error {
		check(c, false)
		ran++
		return nil
	})
	f.Handler()(newCtx(t, vr.Method, vr.Path, vr.RemoteAddr, vr.Header))
	if ran != 2 {
		t.Fatalf("%d of 2 handlers ran", ran)
	}
}

func TestRequest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		app   *fiber.App
		alloc float64 // for a view of the context, used as an interface
	}{
		{"DefaultCtx", fiber.New(), 0},
		{"custom context", newCustomApp(), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inHandler(t, tc.app, adaptertest.ViewRequest(), func(c fiber.Ctx, use bool) {
				want := adaptertest.View{
					RemoteAddr: "203.0.113.7",
					Route:      "/items/:id",
					Values:     map[any]any{"user": "from locals", ctxKey{}: "from context", "missing": nil},
				}
				if use {
					want.Route = "" // see TestRequestRoute
				}
				r := view(c)
				adaptertest.CheckView(t, r, want)
				if got := native(r); got != c {
					t.Errorf("native(view(c)) = %v, want c (%T)", got, c)
				}
				if use {
					return
				}
				// fasthttp holds the peer as a net.Addr: its text costs one
				// allocation.
				if calls, addr := adaptertest.ViewAllocs(func() keyfunc.Request { return view(c) }); calls != tc.alloc || addr > 1+tc.alloc {
					t.Errorf("keyfunc.Request view of %T: %v allocations, want %v, and %v for RemoteAddr, want at most %v", c, calls, tc.alloc, addr, 1+tc.alloc)
				}
			})
		})
	}
}

func TestRequestRemoteAddr(t *testing.T) {
	for _, tc := range []struct{ peer, want string }{
		{"203.0.113.7:1234", "203.0.113.7"},
		{"[::ffff:203.0.113.7]:1234", "203.0.113.7"},
		{"[2001:db8::1]:1234", "2001:db8::1"},
	} {
		vr := adaptertest.ViewRequest()
		vr.RemoteAddr = tc.peer
		inHandler(t, fiber.New(), vr, func(c fiber.Ctx, _ bool) {
			if got := view(c).RemoteAddr(); got != tc.want {
				t.Errorf("peer %s: RemoteAddr() = %q, want %q", tc.peer, got, tc.want)
			}
		})
	}
}

// TestCustomCtxKey: a native key function sees the app's own context type.
func TestCustomCtxKey(t *testing.T) {
	lim := adaptertest.Memory(t)
	f := newCustomApp()
	saw := ""
	f.Get("/", New(lim, core.PerMinute(1), Key(func(c fiber.Ctx) (string, error) {
		_, custom := c.(*customCtx)
		saw = "custom"
		if !custom {
			saw = "not custom"
		}
		return "all", nil
	})), hello)
	res, err := f.Test(httptest.NewRequest(http.MethodGet, "/", nil))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || saw != "custom" {
		t.Errorf("status %d, key function saw a %s context, want 200 and a custom one", res.StatusCode, saw)
	}
}

func bench(b *testing.B, handlers ...any) {
	f := fiber.New()
	f.Get("/items/:id", handlers[0], handlers[1:]...)
	h := f.Handler()
	fctx := newCtx(b, "GET", "/items/7", "203.0.113.7:1234", nil)
	b.ReportAllocs()
	for b.Loop() {
		h(fctx)
		fctx.Response.Reset()
	}
}

func hello(c fiber.Ctx) error { return c.SendStatus(http.StatusOK) }

func BenchmarkBare(b *testing.B) { bench(b, hello) }

func BenchmarkMiddleware(b *testing.B) {
	lim, err := core.NewMemory()
	if err != nil {
		b.Fatal(err)
	}
	bench(b, New(lim, core.PerSecond(1<<30), keyfunc.IP()), hello)
}

func TestRequestRoute(t *testing.T) {
	ok := func(c fiber.Ctx) error { return c.SendStatus(http.StatusOK) }
	for _, tc := range []struct {
		name, path, want string
		register         func(f *fiber.App, mw fiber.Handler)
	}{
		{"App.Use", "/items/7", "", func(f *fiber.App, mw fiber.Handler) {
			f.Use(mw)
			f.Get("/items/:id", ok)
		}},
		{"on the route", "/items/7", "/items/:id", func(f *fiber.App, mw fiber.Handler) {
			f.Get("/items/:id", mw, ok)
		}},
		{"static route", "/HealthZ/", "/healthz", func(f *fiber.App, mw fiber.Handler) {
			f.Get("/healthz", mw, ok)
		}},
		{"wildcard route", "/static/a/b", "/static/*", func(f *fiber.App, mw fiber.Handler) {
			f.Get("/static/*", mw, ok)
		}},
		{"group handler", "/api/items", "", func(f *fiber.App, mw fiber.Handler) {
			f.Group("/api", mw).Get("/items", ok)
		}},
		{"route in a group", "/api/items", "/api/items", func(f *fiber.App, mw fiber.Handler) {
			f.Group("/api").Get("/items", mw, ok)
		}},
		{"Use at the request's path", "/items", "", func(f *fiber.App, mw fiber.Handler) {
			f.Use("/items", mw)
			f.Get("/items", ok)
		}},
		{"no route", "/nowhere", "", func(f *fiber.App, mw fiber.Handler) {
			f.Use(mw)
			f.Get("/items", ok)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fiber.New()
			got := "(not run)"
			tc.register(f, func(c fiber.Ctx) error {
				got = view(c).Route()
				return c.Next()
			})
			f.Handler()(newCtx(t, "GET", tc.path, "203.0.113.7:1234", nil))
			if got != tc.want {
				t.Errorf("Route() for GET %s = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}

// BenchmarkKey measures extracting a tenant, route and IP key through the fiber.Ctx view.
func BenchmarkKey(b *testing.B) {
	ran := false
	f := fiber.New()
	f.Get("/items/:id", func(c fiber.Ctx) error {
		ran = true
		adaptertest.BenchKey(b, func() keyfunc.Request { return view(c) })
		return nil
	})
	kr := adaptertest.KeyRequest()
	f.Handler()(newCtx(b, kr.Method, kr.Path, kr.RemoteAddr, kr.Header))
	if !ran {
		b.Fatal("the route did not run")
	}
}

// TestBuild: Build returns what New would panic with, as an error, and a
// working middleware otherwise.
func TestBuild(t *testing.T) {
	adaptertest.CheckBuild(t, "fiberv3limit", func(lim *core.Limiter, limit core.Limit, key keyfunc.Func) (bool, error) {
		mw, err := Build(lim, limit, key, WithHeaders(policy.HeadersNone))
		return mw != nil, err
	})
}

func TestDefaultScope(t *testing.T) {
	adaptertest.CheckDefaultScope(t, func(lim *core.Limiter) adaptertest.Serve {
		f := fiber.New()
		okay := func(fiber.Ctx) error { return nil }
		f.Get("/a", New(lim, core.PerMinute(1), keyfunc.Static("all")), okay)
		f.Get("/b", New(lim, core.PerMinute(1), keyfunc.Static("all")), okay)
		return func(r adaptertest.Request) adaptertest.Response {
			resp, err := f.Test(httptest.NewRequest("GET", r.Path, nil))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			return adaptertest.Response{Status: resp.StatusCode, Header: resp.Header}
		}
	})
}
