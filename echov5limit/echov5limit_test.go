package echov5limit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/sluicehq/sluice/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

func TestConformance(t *testing.T) {
	adaptertest.Run(t, build)
}

func TestConcurrency(t *testing.T) {
	adaptertest.CheckConcurrency(t, build)
}

func TestNewPanics(t *testing.T) {
	adaptertest.RunPanics(t, "echov5limit", func(lim *core.Limiter, m *adaptertest.Middleware) { middleware(lim, m) })
}

// build serves app with an echo instance: app.Use through Echo.Use, route
// middlewares as the route's own.
//
// The app's HTTPErrorHandler answers the middleware's errors (a 429, or a
// failure) with the status text as plain text, the answer every adapter
// gives by default, so that the table checks that they reach it with the
// right status and with the rate-limit fields still on the response.
func build(_ testing.TB, app adaptertest.App) adaptertest.Serve {
	e := echo.New()
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		code := echo.StatusCode(err)
		if code == 0 {
			code = http.StatusInternalServerError
		}
		_ = c.Blob(code, "text/plain; charset=utf-8", []byte(http.StatusText(code)+"\n"))
	}
	e.Use(recoverer)
	if app.Use != nil {
		e.Use(middleware(app.Limiter, app.Use))
	}
	for _, rt := range app.Routes {
		ok := func(c *echo.Context) error {
			if rt.Handler != nil {
				rt.Handler(call(c))
			}
			status, asError := adaptertest.Answer(call(c))
			if asError {
				return &echo.HTTPError{Code: status, Message: http.StatusText(status)}
			}
			return c.String(status, adaptertest.OK)
		}
		var mws []echo.MiddlewareFunc
		if rt.Middleware != nil {
			mws = append(mws, middleware(app.Limiter, rt.Middleware))
		}
		e.Add(rt.Method, rt.ColonPattern(), ok, mws...)
	}
	return adaptertest.ServeHTTP(e)
}

// recoverer answers 500 for a handler that panics, as echo's Recover
// middleware does.
func recoverer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) (err error) {
		defer func() {
			if recover() != nil {
				err = &echo.HTTPError{Code: http.StatusInternalServerError, Message: http.StatusText(http.StatusInternalServerError)}
			}
		}()
		return next(c)
	}
}

// call is the neutral view of a request.
func call(c *echo.Context) adaptertest.Call {
	return adaptertest.Call{Method: c.Request().Method, Path: c.Request().URL.Path, Header: c.Request().Header.Get, Context: c.Request().Context()}
}

// middleware translates a neutral middleware into New and its options.
func middleware(lim *core.Limiter, m *adaptertest.Middleware) echo.MiddlewareFunc {
	reply := func(c *echo.Context, rep adaptertest.Reply) error {
		return c.Blob(rep.Status, rep.ContentType, []byte(rep.Body))
	}
	opts := adaptertest.Options[*echo.Context, Handlers](m, call)
	if m.Deny != nil {
		opts = append(opts, WithDenyHandler(func(c *echo.Context, res core.Result) error { return reply(c, m.Deny(res)) }))
	}
	if m.Error != nil {
		opts = append(opts, WithErrorHandler(func(c *echo.Context, err error) error { return reply(c, m.Error(err)) }))
	}
	key := m.Key
	if m.Param != "" {
		key = Key(func(c *echo.Context) (string, error) { return "param:" + c.Param(m.Param), nil })
	}
	return New(lim, m.Limit, key, opts...)
}

// TestDenialReachesErrorHandler: an app whose HTTPErrorHandler answers
// JSON gets the 429 as an *echo.HTTPError, with Retry-After and the
// rate-limit fields already on the response.
func TestDenialReachesErrorHandler(t *testing.T) {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	var seen *echo.HTTPError
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		if !errors.As(err, &seen) {
			t.Errorf("the error handler got %T %v, want an *echo.HTTPError", err, err)
			return
		}
		_ = c.JSON(seen.Code, map[string]string{"error": "slow down"})
	}
	e.GET("/", func(c *echo.Context) error { return c.String(http.StatusOK, "ok") }, New(lim, core.PerMinute(1), keyfunc.Static("all")))
	for i, want := range []int{200, 429} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != want {
			t.Fatalf("request %d: %d, want %d", i, w.Code, want)
		}
		if want == 429 {
			if seen == nil || seen.Code != 429 {
				t.Fatalf("the error handler saw %v, want an *echo.HTTPError with code 429", seen)
			}
			if w.Header().Get("Retry-After") != "60" || w.Header().Get("X-Ratelimit-Remaining") != "0" || w.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("429 headers %v", w.Header())
			}
		}
	}
}

// TestFailureReachesErrorHandler: a request without a key reaches the
// app's HTTPErrorHandler as an *echo.HTTPError with status 400 that wraps
// keyfunc.ErrNoKey, and echo's default handler shows only the status text.
func TestFailureReachesErrorHandler(t *testing.T) {
	lim := adaptertest.Memory(t)
	for _, expose := range []bool{false, true} {
		e := echo.New()
		var seen error
		deflt := echo.DefaultHTTPErrorHandler(expose)
		e.HTTPErrorHandler = func(c *echo.Context, err error) {
			seen = err
			deflt(c, err)
		}
		e.GET("/", func(c *echo.Context) error { return c.NoContent(http.StatusOK) }, New(lim, core.PerMinute(1), keyfunc.Tenant("X-Tenant")))
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		var he *echo.HTTPError
		if !errors.As(seen, &he) || he.Code != 400 || !errors.Is(seen, keyfunc.ErrNoKey) {
			t.Errorf("the error handler saw %v, want an *echo.HTTPError with code 400 wrapping keyfunc.ErrNoKey", seen)
		}
		if w.Code != 400 {
			t.Errorf("status %d, want 400", w.Code)
		}
		if body := w.Body.String(); !expose && body != "{\"message\":\"Bad Request\"}\n" {
			t.Errorf("DefaultHTTPErrorHandler(false) wrote %q, want only the status text", body)
		}
	}
}

type ctxKey struct{}

func TestRequest(t *testing.T) {
	ran := false
	e := echo.New()
	e.GET("/items/:id", func(c *echo.Context) error {
		ran = true
		c.Set("user", "from echo")
		c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), ctxKey{}, "from context")))
		adaptertest.CheckView(t, request{c}, adaptertest.View{
			RemoteAddr: "203.0.113.7:1234",
			Route:      "/items/:id",
			Values:     map[any]any{"user": "from echo", ctxKey{}: "from context", "missing": nil},
		})
		if calls, addr := adaptertest.ViewAllocs(func() keyfunc.Request { return request{c} }); calls != 0 || addr != 0 {
			t.Errorf("keyfunc.Request view of *echo.Context: %v and %v allocations, want 0", calls, addr)
		}
		return nil
	})
	adaptertest.ServeHTTP(e)(adaptertest.ViewRequest())
	if !ran {
		t.Fatal("the route did not run")
	}
}

// TestRequestRoute: the route is known after routing (Use, a group, the
// route's own middleware), and not before it (Pre).
func TestRequestRoute(t *testing.T) {
	okay := func(c *echo.Context) error { return c.NoContent(http.StatusOK) }
	for _, tc := range []struct {
		name, path, want string
		register         func(e *echo.Echo, mw echo.MiddlewareFunc)
	}{
		{"Echo.Use", "/items/7", "/items/:id", func(e *echo.Echo, mw echo.MiddlewareFunc) {
			e.Use(mw)
			e.GET("/items/:id", okay)
		}},
		{"on the route", "/items/7", "/items/:id", func(e *echo.Echo, mw echo.MiddlewareFunc) {
			e.GET("/items/:id", okay, mw)
		}},
		{"group", "/api/items", "/api/items", func(e *echo.Echo, mw echo.MiddlewareFunc) {
			e.Group("/api", mw).GET("/items", okay)
		}},
		{"Echo.Pre", "/items/7", "", func(e *echo.Echo, mw echo.MiddlewareFunc) {
			e.Pre(mw)
			e.GET("/items/:id", okay)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := echo.New()
			got := "(not run)"
			tc.register(e, func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c *echo.Context) error {
					got = request{c}.Route()
					return next(c)
				}
			})
			e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, tc.path, nil))
			if got != tc.want {
				t.Errorf("Route() for GET %s = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}

func bench(b *testing.B, mws ...echo.MiddlewareFunc) {
	e := echo.New()
	e.GET("/items/:id", func(c *echo.Context) error { return c.NoContent(http.StatusOK) }, mws...)
	adaptertest.BenchHTTP(b, e)
}

func BenchmarkBare(b *testing.B) { bench(b) }

func BenchmarkMiddleware(b *testing.B) {
	lim, err := core.NewMemory()
	if err != nil {
		b.Fatal(err)
	}
	bench(b, New(lim, core.PerSecond(1<<30), keyfunc.IP()))
}

// BenchmarkKey measures extracting a tenant, route and IP key through the *echo.Context view.
func BenchmarkKey(b *testing.B) {
	ran := false
	e := echo.New()
	e.GET("/items/:id", func(c *echo.Context) error {
		ran = true
		adaptertest.BenchKey(b, func() keyfunc.Request { return request{c} })
		return nil
	})
	adaptertest.ServeHTTP(e)(adaptertest.KeyRequest())
	if !ran {
		b.Fatal("the route did not run")
	}
}

// TestBuild: Build returns what New would panic with, as an error, and a
// working middleware otherwise.
func TestBuild(t *testing.T) {
	adaptertest.CheckBuild(t, "echov5limit", func(lim *core.Limiter, limit core.Limit, key keyfunc.Func) (bool, error) {
		mw, err := Build(lim, limit, key, WithHeaders(policy.HeadersNone))
		return mw != nil, err
	})
}

func TestDefaultScope(t *testing.T) {
	adaptertest.CheckDefaultScope(t, func(lim *core.Limiter) adaptertest.Serve {
		e := echo.New()
		okay := func(*echo.Context) error { return nil }
		e.GET("/a", okay, New(lim, core.PerMinute(1), keyfunc.Static("all")))
		e.GET("/b", okay, New(lim, core.PerMinute(1), keyfunc.Static("all")))
		return adaptertest.ServeHTTP(e)
	})
}
