package httplimit

import (
	"context"
	"io"
	"net/http"
	"testing"

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
	adaptertest.RunPanics(t, "httplimit", func(lim *core.Limiter, m *adaptertest.Middleware) { middleware(lim, m) })
}

// build serves app with a ServeMux: app.Use wraps the whole mux, route
// middlewares wrap their route's handler, and a recoverer the whole, as
// a panicking handler's server would answer it.
func build(_ testing.TB, app adaptertest.App) adaptertest.Serve {
	mux := http.NewServeMux()
	for _, rt := range app.Routes {
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if rt.Handler != nil {
				rt.Handler(call(r))
			}
			status, _ := adaptertest.Answer(call(r))
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(adaptertest.OK))
		})
		if rt.Middleware != nil {
			h = middleware(app.Limiter, rt.Middleware)(h)
		}
		mux.Handle(rt.Method+" "+rt.Pattern, h)
	}
	var root http.Handler = mux
	if app.Use != nil {
		root = middleware(app.Limiter, app.Use)(mux)
	}
	return adaptertest.ServeHTTP(recoverer(root))
}

// recoverer answers 500 for a handler that panics.
func recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if recover() != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// call is the neutral view of a request.
func call(r *http.Request) adaptertest.Call {
	return adaptertest.Call{Method: r.Method, Path: r.URL.Path, Header: r.Header.Get, Context: r.Context()}
}

// middleware translates a neutral middleware into New and its options.
func middleware(lim *core.Limiter, m *adaptertest.Middleware) func(http.Handler) http.Handler {
	reply := func(w http.ResponseWriter, rep adaptertest.Reply) {
		w.Header().Set("Content-Type", rep.ContentType)
		w.WriteHeader(rep.Status)
		_, _ = w.Write([]byte(rep.Body))
	}
	opts := adaptertest.Options[*http.Request, Handlers](m, call)
	if m.Deny != nil {
		opts = append(opts, WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, res core.Result) { reply(w, m.Deny(res)) }))
	}
	if m.Error != nil {
		opts = append(opts, WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) { reply(w, m.Error(err)) }))
	}
	key := m.Key
	if m.Param != "" {
		key = Key(func(r *http.Request) (string, error) { return "param:" + r.PathValue(m.Param), nil })
	}
	return New(lim, m.Limit, key, opts...)
}

type ctxKey struct{}

func TestRequest(t *testing.T) {
	ran := false
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(_ http.ResponseWriter, r *http.Request) {
		ran = true
		r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, "from context"))
		adaptertest.CheckView(t, request{r}, adaptertest.View{
			RemoteAddr: "203.0.113.7:1234",
			Route:      "GET /items/{id}",
			Values:     map[any]any{ctxKey{}: "from context", "missing": nil},
		})
		if calls, addr := adaptertest.ViewAllocs(func() keyfunc.Request { return request{r} }); calls+addr != 0 {
			t.Errorf("keyfunc.Request view of *http.Request: %v+%v allocations, want 0", calls, addr)
		}
	})
	adaptertest.ServeHTTP(mux)(adaptertest.ViewRequest())
	if !ran {
		t.Fatal("the route did not run")
	}
}

func bench(b *testing.B, h http.Handler) {
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", h)
	adaptertest.BenchHTTP(b, mux)
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })

func BenchmarkBare(b *testing.B) { bench(b, hello) }

func BenchmarkMiddleware(b *testing.B) {
	lim, err := core.NewMemory()
	if err != nil {
		b.Fatal(err)
	}
	bench(b, New(lim, core.PerSecond(1<<30), keyfunc.IP())(hello))
}

// BenchmarkConcurrency is BenchmarkMiddleware with a concurrency cap on
// the memory limiter: a slot taken and given back per request.
func BenchmarkConcurrency(b *testing.B) {
	lim, err := core.NewMemory()
	if err != nil {
		b.Fatal(err)
	}
	bench(b, New(lim, core.PerSecond(1<<30), keyfunc.IP(), WithConcurrency(core.ConcurrencyLimit{Max: 10}))(hello))
}

// BenchmarkKey measures extracting a tenant, route and IP key through the *http.Request view.
func BenchmarkKey(b *testing.B) {
	ran := false
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(_ http.ResponseWriter, r *http.Request) {
		ran = true
		adaptertest.BenchKey(b, func() keyfunc.Request { return request{r} })
	})
	adaptertest.ServeHTTP(mux)(adaptertest.KeyRequest())
	if !ran {
		b.Fatal("the route did not run")
	}
}

// TestBuild: Build returns what New would panic with, as an error, and a
// working middleware otherwise.
func TestBuild(t *testing.T) {
	adaptertest.CheckBuild(t, "httplimit", func(lim *core.Limiter, limit core.Limit, key keyfunc.Func) (bool, error) {
		mw, err := Build(lim, limit, key, WithHeaders(policy.HeadersNone))
		return mw != nil, err
	})
}

func TestDefaultScope(t *testing.T) {
	adaptertest.CheckDefaultScope(t, func(lim *core.Limiter) adaptertest.Serve {
		ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
		mux := http.NewServeMux()
		mux.Handle("GET /a", New(lim, core.PerMinute(1), keyfunc.Static("all"))(ok))
		mux.Handle("GET /b", New(lim, core.PerMinute(1), keyfunc.Static("all"))(ok))
		return adaptertest.ServeHTTP(mux)
	})
}

// TestAroundServeMux: a middleware wrapping a ServeMux is one budget per
// key across the mux's routes, by default or with WithScope; with
// WithPerRoute(true) it counts per route the mux matches (HEAD with its GET
// route, every unmatched path in one bucket).
func TestAroundServeMux(t *testing.T) {
	type step struct {
		method, path string
		want         int
	}
	for _, tc := range []struct {
		name  string
		opts  []Option
		steps []step
	}{
		{"one budget", nil, []step{
			{"GET", "/orders/1", 200}, {"GET", "/invoices", 429}, {"GET", "/.env", 429},
		}},
		{"per route", []Option{WithPerRoute(true)}, []step{
			{"GET", "/orders/1", 200}, {"HEAD", "/orders/2", 429}, // the GET route, served for HEAD
			{"GET", "/invoices", 200},
			{"GET", "/wp-login.php", 404}, {"GET", "/.env", 429},
		}},
		{"one scope", []Option{WithScope("api")}, []step{
			{"GET", "/orders/1", 200}, {"GET", "/invoices", 429}, {"GET", "/.env", 429},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }
			mux.HandleFunc("GET /orders/{id}", ok)
			mux.HandleFunc("GET /invoices", ok)
			serve := adaptertest.ServeHTTP(New(adaptertest.Memory(t), core.PerMinute(1), keyfunc.IP(), tc.opts...)(mux))
			for i, st := range tc.steps {
				if got := serve(adaptertest.Request{Method: st.method, Path: st.path, RemoteAddr: adaptertest.DefaultRemoteAddr}).Status; got != st.want {
					t.Errorf("request %d: %s %s: status %d, want %d", i+1, st.method, st.path, got, st.want)
				}
			}
		})
	}
}

// patternless serves routes the way routers that report no pattern do
// (gorilla/mux, julienschmidt/httprouter): it matches by path and leaves
// Request.Pattern empty, so a middleware around a route's handler sees no
// route. The module internal/compat runs the same checks on the real
// routers, which stay out of this module's graph.
type patternless map[string]http.Handler

func (m patternless) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, ok := m[r.Method+" "+r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h.ServeHTTP(w, r)
}

// TestRouterWithoutPatterns: under a router that reports no pattern, a
// helper's middlewares on /orders and /invoices count apart with
// WithRoute; per route without it, they share the unmatched scope and the
// first request says so in a warning naming WithRoute; without an option,
// they share one budget, named in one warning by their paths.
func TestRouterWithoutPatterns(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	for _, tc := range []struct {
		name     string
		opts     func(route string) []Option
		invoices int    // the status of GET /invoices after two of GET /orders
		logged   string // a warning that must be logged times times
		times    int
	}{
		{"WithRoute", func(route string) []Option { return []Option{WithRoute(route)} }, 200, "", 0},
		// Once per middleware.
		{"per route", func(string) []Option { return []Option{WithPerRoute(true)} }, 429, "WithRoute(\"GET /orders\")", 2},
		{"no option", func(string) []Option { return nil }, 429, "first=path /orders", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim, log := adaptertest.Logged(t)
			mw := func(route string) http.Handler {
				return New(lim, core.PerMinute(2), keyfunc.IP(), tc.opts(route)...)(ok)
			}
			serve := adaptertest.ServeHTTP(patternless{"GET /orders": mw("GET /orders"), "GET /invoices": mw("GET /invoices")})
			for i, st := range []struct {
				path string
				want int
			}{{"/orders", 200}, {"/orders", 200}, {"/orders", 429}, {"/invoices", tc.invoices}} {
				if got := serve(adaptertest.Request{Method: "GET", Path: st.path, RemoteAddr: adaptertest.DefaultRemoteAddr}).Status; got != st.want {
					t.Errorf("request %d: GET %s: status %d, want %d", i+1, st.path, got, st.want)
				}
			}
			if tc.logged == "" {
				if got := log.Lines(); len(got) != 0 {
					t.Errorf("logged %q, want nothing", got)
				}
				return
			}
			if got := log.Matching(tc.logged); len(got) != tc.times {
				t.Errorf("warnings with %q: %q, want %d", tc.logged, log.Lines(), tc.times)
			}
		})
	}
}
