package fiberlimit

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/gofiber/fiber/v2"
	fiberrecover "github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/sluicehq/sluice/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
	"github.com/valyala/fasthttp"
)

func TestConformance(t *testing.T) {
	adaptertest.Run(t, build)
}

func TestConcurrency(t *testing.T) {
	adaptertest.CheckConcurrency(t, build)
}

func TestNewPanics(t *testing.T) {
	adaptertest.RunPanics(t, "fiberlimit", func(lim *core.Limiter, m *adaptertest.Middleware) { middleware(lim, m) })
}

// userContext is the fasthttp user value under which serve hands the test
// request's context to the app.
type userContext struct{}

// build serves app with a fiber app: app.Use through App.Use, route
// middlewares in their route's handlers.
//
// Requests go straight to the app's fasthttp handler on a RequestCtx made
// with Init, which sets the peer address; App.Test would report 0.0.0.0 for
// every request. fiber v2 has no request context of its own, so a first
// handler sets the user context from the test request, as an app's timeout
// middleware would.
//
// The app's ErrorHandler answers the middleware's errors (a 429, or a
// failure) with the status text as plain text, the answer every adapter
// gives by default, so that the table checks that they reach it with the
// right status and with the rate-limit fields still on the response.
func build(tb testing.TB, app adaptertest.App) adaptertest.Serve {
	f := fiber.New(fiber.Config{DisableStartupMessage: true, ErrorHandler: func(c *fiber.Ctx, err error) error {
		code := fiber.StatusInternalServerError
		if fe, ok := err.(*fiber.Error); ok {
			code = fe.Code
		}
		c.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
		return c.Status(code).SendString(utils.StatusMessage(code) + "\n")
	}})
	f.Use(fiberrecover.New()) // a panic answers 500, through the ErrorHandler
	f.Use(func(c *fiber.Ctx) error {
		if ctx, ok := c.Context().UserValue(userContext{}).(context.Context); ok {
			c.SetUserContext(ctx)
		}
		return c.Next()
	})
	if app.Use != nil {
		f.Use(middleware(app.Limiter, app.Use))
	}
	for _, rt := range app.Routes {
		ok := func(c *fiber.Ctx) error {
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
		handlers := []fiber.Handler{ok}
		if rt.Middleware != nil {
			handlers = []fiber.Handler{middleware(app.Limiter, rt.Middleware), ok}
		}
		f.Add(rt.Method, rt.ColonPattern(), handlers...)
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
func call(c *fiber.Ctx) adaptertest.Call {
	return adaptertest.Call{Method: c.Method(), Path: c.Path(), Header: func(name string) string { return c.Get(name) }, Context: c.UserContext()}
}

// middleware translates a neutral middleware into New and its options.
func middleware(lim *core.Limiter, m *adaptertest.Middleware) fiber.Handler {
	reply := func(c *fiber.Ctx, rep adaptertest.Reply) error {
		c.Set(fiber.HeaderContentType, rep.ContentType)
		return c.Status(rep.Status).SendString(rep.Body)
	}
	opts := adaptertest.Options[*fiber.Ctx, Handlers](m, call)
	if m.Deny != nil {
		opts = append(opts, WithDenyHandler(func(c *fiber.Ctx, res core.Result) error { return reply(c, m.Deny(res)) }))
	}
	if m.Error != nil {
		opts = append(opts, WithErrorHandler(func(c *fiber.Ctx, err error) error { return reply(c, m.Error(err)) }))
	}
	key := m.Key
	if m.Param != "" {
		key = Key(func(c *fiber.Ctx) (string, error) { return "param:" + c.Params(m.Param), nil })
	}
	return New(lim, m.Limit, key, opts...)
}

type ctxKey struct{}

// inHandler runs check in a Use handler (use is true) and then in the route
// handler of "/items/:id", for the request vr.
func inHandler(t *testing.T, vr adaptertest.Request, check func(c *fiber.Ctx, use bool)) {
	t.Helper()
	f := fiber.New(fiber.Config{DisableStartupMessage: true})
	ran := 0
	f.Use(func(c *fiber.Ctx) error {
		c.Locals("user", "from locals")
		c.SetUserContext(context.WithValue(context.Background(), ctxKey{}, "from user context"))
		check(c, true)
		ran++
		return c.Next()
	})
	f.Get("/items/:id", func(c *fiber.Ctx) error {
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
	inHandler(t, adaptertest.ViewRequest(), func(c *fiber.Ctx, use bool) {
		want := adaptertest.View{
			RemoteAddr: "203.0.113.7",
			Route:      "/items/:id",
			Values:     map[any]any{"user": "from locals", ctxKey{}: "from user context", "missing": nil},
		}
		if use {
			want.Route = "" // see TestRequestRoute
		}
		adaptertest.CheckView(t, request{c}, want)
		if use {
			return
		}
		// fasthttp holds the peer as a net.Addr: its text costs one
		// allocation.
		if calls, addr := adaptertest.ViewAllocs(func() keyfunc.Request { return request{c} }); calls != 0 || addr > 1 {
			t.Errorf("keyfunc.Request view of *fiber.Ctx: %v allocations, want 0, and %v for RemoteAddr, want at most 1", calls, addr)
		}
	})
}

func TestRequestRemoteAddr(t *testing.T) {
	for _, tc := range []struct{ peer, want string }{
		{"203.0.113.7:1234", "203.0.113.7"},
		{"[::ffff:203.0.113.7]:1234", "203.0.113.7"},
		{"[2001:db8::1]:1234", "2001:db8::1"},
	} {
		vr := adaptertest.ViewRequest()
		vr.RemoteAddr = tc.peer
		inHandler(t, vr, func(c *fiber.Ctx, _ bool) {
			if got := (request{c}).RemoteAddr(); got != tc.want {
				t.Errorf("peer %s: RemoteAddr() = %q, want %q", tc.peer, got, tc.want)
			}
		})
	}
}

func bench(b *testing.B, handlers ...fiber.Handler) {
	f := fiber.New(fiber.Config{DisableStartupMessage: true})
	f.Get("/items/:id", handlers...)
	h := f.Handler()
	fctx := newCtx(b, "GET", "/items/7", "203.0.113.7:1234", nil)
	b.ReportAllocs()
	for b.Loop() {
		h(fctx)
		fctx.Response.Reset()
	}
}

func hello(c *fiber.Ctx) error { return c.SendStatus(http.StatusOK) }

func BenchmarkBare(b *testing.B) { bench(b, hello) }

func BenchmarkMiddleware(b *testing.B) {
	lim, err := core.NewMemory()
	if err != nil {
		b.Fatal(err)
	}
	bench(b, New(lim, core.PerSecond(1<<30), keyfunc.IP()), hello)
}

func TestRequestRoute(t *testing.T) {
	ok := func(c *fiber.Ctx) error { return c.SendStatus(http.StatusOK) }
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fiber.New(fiber.Config{DisableStartupMessage: true})
			got := "(not run)"
			tc.register(f, func(c *fiber.Ctx) error {
				got = request{c}.Route()
				return c.Next()
			})
			f.Handler()(newCtx(t, "GET", tc.path, "203.0.113.7:1234", nil))
			if got != tc.want {
				t.Errorf("Route() for GET %s = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}

// BenchmarkKey measures extracting a tenant, route and IP key through the *fiber.Ctx view.
func BenchmarkKey(b *testing.B) {
	ran := false
	f := fiber.New(fiber.Config{DisableStartupMessage: true})
	f.Get("/items/:id", func(c *fiber.Ctx) error {
		ran = true
		adaptertest.BenchKey(b, func() keyfunc.Request { return request{c} })
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
	adaptertest.CheckBuild(t, "fiberlimit", func(lim *core.Limiter, limit core.Limit, key keyfunc.Func) (bool, error) {
		mw, err := Build(lim, limit, key, WithHeaders(policy.HeadersNone))
		return mw != nil, err
	})
}

func TestDefaultScope(t *testing.T) {
	adaptertest.CheckDefaultScope(t, func(lim *core.Limiter) adaptertest.Serve {
		f := fiber.New(fiber.Config{DisableStartupMessage: true})
		okay := func(*fiber.Ctx) error { return nil }
		f.Get("/a", New(lim, core.PerMinute(1), keyfunc.Static("all")), okay)
		f.Get("/b", New(lim, core.PerMinute(1), keyfunc.Static("all")), okay)
		return func(r adaptertest.Request) adaptertest.Response {
			resp, err := f.Test(httptest.NewRequest("GET", r.Path, nil), -1)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			return adaptertest.Response{Status: resp.StatusCode, Header: resp.Header}
		}
	})
}
