package ginlimit

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
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
	adaptertest.RunPanics(t, "ginlimit", func(lim *core.Limiter, m *adaptertest.Middleware) { middleware(lim, m) })
}

// build serves app with a gin engine: gin's recovery first, app.Use
// through Engine.Use, route middlewares in their route's chain.
func build(_ testing.TB, app adaptertest.App) adaptertest.Serve {
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard))
	if app.Use != nil {
		r.Use(middleware(app.Limiter, app.Use))
	}
	for _, rt := range app.Routes {
		ok := func(c *gin.Context) {
			if rt.Handler != nil {
				rt.Handler(call(c))
			}
			status, _ := adaptertest.Answer(call(c)) // no error return in gin: the status is written
			c.String(status, adaptertest.OK)
		}
		chain := []gin.HandlerFunc{ok}
		if rt.Middleware != nil {
			chain = []gin.HandlerFunc{middleware(app.Limiter, rt.Middleware), ok}
		}
		r.Handle(rt.Method, rt.ColonPattern(), chain...)
	}
	return adaptertest.ServeHTTP(r)
}

// call is the neutral view of a request.
func call(c *gin.Context) adaptertest.Call {
	return adaptertest.Call{Method: c.Request.Method, Path: c.Request.URL.Path, Header: c.GetHeader, Context: c.Request.Context()}
}

// middleware translates a neutral middleware into New and its options.
func middleware(lim *core.Limiter, m *adaptertest.Middleware) gin.HandlerFunc {
	reply := func(c *gin.Context, rep adaptertest.Reply) { c.Data(rep.Status, rep.ContentType, []byte(rep.Body)) }
	opts := adaptertest.Options[*gin.Context, Handlers](m, call)
	if m.Deny != nil {
		opts = append(opts, WithDenyHandler(func(c *gin.Context, res core.Result) { reply(c, m.Deny(res)) }))
	}
	if m.Error != nil {
		opts = append(opts, WithErrorHandler(func(c *gin.Context, err error) { reply(c, m.Error(err)) }))
	}
	key := m.Key
	if m.Param != "" {
		key = Key(func(c *gin.Context) (string, error) { return "param:" + c.Param(m.Param), nil })
	}
	return New(lim, m.Limit, key, opts...)
}

type ctxKey struct{}

func TestRequest(t *testing.T) {
	ran := false
	r := gin.New()
	r.GET("/items/:id", func(c *gin.Context) {
		ran = true
		c.Set("user", "from gin")
		c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), ctxKey{}, "from context"))
		adaptertest.CheckView(t, request{c}, adaptertest.View{
			RemoteAddr: "203.0.113.7:1234",
			Route:      "/items/:id",
			Values:     map[any]any{"user": "from gin", ctxKey{}: "from context", "missing": nil},
		})
		if calls, addr := adaptertest.ViewAllocs(func() keyfunc.Request { return request{c} }); calls+addr != 0 {
			t.Errorf("keyfunc.Request view of *gin.Context: %v+%v allocations, want 0", calls, addr)
		}
	})
	adaptertest.ServeHTTP(r)(adaptertest.ViewRequest())
	if !ran {
		t.Fatal("the route did not run")
	}
}

func bench(b *testing.B, chain ...gin.HandlerFunc) {
	r := gin.New()
	r.GET("/items/:id", chain...)
	adaptertest.BenchHTTP(b, r)
}

func hello(c *gin.Context) { c.Status(http.StatusOK) }

func BenchmarkBare(b *testing.B) { bench(b, hello) }

func BenchmarkMiddleware(b *testing.B) {
	lim, err := core.NewMemory()
	if err != nil {
		b.Fatal(err)
	}
	bench(b, New(lim, core.PerSecond(1<<30), keyfunc.IP()), hello)
}

// BenchmarkKey measures extracting a tenant, route and IP key through the *gin.Context view.
func BenchmarkKey(b *testing.B) {
	ran := false
	r := gin.New()
	r.GET("/items/:id", func(c *gin.Context) {
		ran = true
		adaptertest.BenchKey(b, func() keyfunc.Request { return request{c} })
	})
	adaptertest.ServeHTTP(r)(adaptertest.KeyRequest())
	if !ran {
		b.Fatal("the route did not run")
	}
}

// TestFrameworkClientIP: with keyfunc.FrameworkClientIP, the key is gin's
// own ClientIP, which follows the engine's trusted proxies.
func TestFrameworkClientIP(t *testing.T) {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	if err := r.SetTrustedProxies([]string{"10.0.0.0/8"}); err != nil {
		t.Fatal(err)
	}
	var got string
	key := keyfunc.IP(keyfunc.FrameworkClientIP())
	r.GET("/", New(lim, core.PerMinute(10), func(req keyfunc.Request) (string, error) {
		k, err := key(req)
		got = k
		return k, err
	}), func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	for _, tc := range []struct{ peer, want string }{
		{"10.0.0.1:5000", "ip:198.51.100.9"}, // a trusted proxy: gin reads X-Forwarded-For
		{"192.0.2.1:5000", "ip:192.0.2.1"},   // not trusted: gin keeps the peer
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = tc.peer
		req.Header.Set("X-Forwarded-For", "198.51.100.9")
		r.ServeHTTP(httptest.NewRecorder(), req)
		if got != tc.want {
			t.Errorf("from %s: key %q, want %q", tc.peer, got, tc.want)
		}
	}
}

// TestBuild: Build returns what New would panic with, as an error, and a
// working middleware otherwise.
func TestBuild(t *testing.T) {
	adaptertest.CheckBuild(t, "ginlimit", func(lim *core.Limiter, limit core.Limit, key keyfunc.Func) (bool, error) {
		mw, err := Build(lim, limit, key, WithHeaders(policy.HeadersNone))
		return mw != nil, err
	})
}

func TestDefaultScope(t *testing.T) {
	adaptertest.CheckDefaultScope(t, func(lim *core.Limiter) adaptertest.Serve {
		r := gin.New()
		r.GET("/a", New(lim, core.PerMinute(1), keyfunc.Static("all")), func(*gin.Context) {})
		r.GET("/b", New(lim, core.PerMinute(1), keyfunc.Static("all")), func(*gin.Context) {})
		return adaptertest.ServeHTTP(r)
	})
}
