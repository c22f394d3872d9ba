package compat

import (
	"io"
	"net/http"
	"testing"

	"github.com/gorilla/mux"
	"github.com/julienschmidt/httprouter"

	"github.com/sluicehq/sluice/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestRoutersWithoutPatterns: gorilla/mux and httprouter set no
// Request.Pattern, so httplimit's middleware on a route cannot see the
// route. With WithRoute, a helper's middlewares on /orders and /invoices
// count per route; per route without it, the first request of each logs
// a warning naming WithRoute; with no option, their one shared budget is
// named in one warning. httplimit's own test emulates such a router; this
// one runs the real ones, kept out of the root module's graph.
func TestRoutersWithoutPatterns(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	routers := map[string]func(orders, invoices http.Handler) http.Handler{
		"gorilla/mux": func(orders, invoices http.Handler) http.Handler {
			r := mux.NewRouter()
			r.Handle("/orders", orders).Methods("GET")
			r.Handle("/invoices", invoices).Methods("GET")
			return r
		},
		"httprouter": func(orders, invoices http.Handler) http.Handler {
			r := httprouter.New()
			r.Handler("GET", "/orders", orders)
			r.Handler("GET", "/invoices", invoices)
			return r
		},
	}
	for name, router := range routers {
		for _, tc := range []struct {
			name     string
			opts     func(route string) []httplimit.Option
			invoices int // GET /invoices after GET /orders spent its budget
			warning  string
			times    int
		}{
			{"WithRoute", func(route string) []httplimit.Option { return []httplimit.Option{httplimit.WithRoute(route)} }, 200, "", 0},
			{"per route", func(string) []httplimit.Option { return []httplimit.Option{httplimit.WithPerRoute(true)} }, 429, "WithRoute(", 2},
			{"no option", func(string) []httplimit.Option { return nil }, 429, "share one budget", 1},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				lim, log := adaptertest.Logged(t)
				mw := func(route string) http.Handler {
					return httplimit.New(lim, core.PerMinute(1), keyfunc.IP(), tc.opts(route)...)(ok)
				}
				serve := adaptertest.ServeHTTP(router(mw("GET /orders"), mw("GET /invoices")))
				for i, st := range []struct {
					path string
					want int
				}{{"/orders", 200}, {"/orders", 429}, {"/invoices", tc.invoices}} {
					got := serve(adaptertest.Request{Method: "GET", Path: st.path, RemoteAddr: adaptertest.DefaultRemoteAddr})
					if got.Status != st.want {
						t.Errorf("request %d: GET %s: status %d, want %d", i+1, st.path, got.Status, st.want)
					}
				}
				if got := len(log.Matching(tc.warning)); tc.warning != "" && got != tc.times {
					t.Errorf("%d warnings with %q in %q, want %d", got, tc.warning, log.Lines(), tc.times)
				}
				if tc.warning == "" && len(log.Lines()) != 0 {
					t.Errorf("logged %q, want nothing", log.Lines())
				}
			})
		}
	}
}
