package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/smoketest"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
)

func TestRun(t *testing.T) {
	out := smoketest.Start(t, run, "-addr", "127.0.0.1:0")
	smoketest.Curl(t, out.String())
}

// TestRouteKeyPlacement pins down what a route key sees in each place chi
// lets a middleware go, for GET /api/items/7 routed by the pattern
// /api/items/{id}: the full pattern on the route and in groups, the
// mount's pattern in a subrouter's r.Use, and nothing (400) in the root's
// r.Use.
func TestRouteKeyPlacement(t *testing.T) {
	ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }
	for _, tc := range []struct {
		name   string
		routes func(r chi.Router, mw func(http.Handler) http.Handler)
		status int
		key    string
	}{
		{"r.Use on the root router", func(r chi.Router, mw func(http.Handler) http.Handler) {
			r.Use(mw)
			r.Get("/api/items/{id}", ok)
		}, http.StatusBadRequest, ""},
		{"r.With on the route", func(r chi.Router, mw func(http.Handler) http.Handler) {
			r.With(mw).Get("/api/items/{id}", ok)
		}, http.StatusOK, "route:GET /api/items/{id}"},
		{"r.Use in r.Group", func(r chi.Router, mw func(http.Handler) http.Handler) {
			r.Group(func(r chi.Router) {
				r.Use(mw)
				r.Get("/api/items/{id}", ok)
			})
		}, http.StatusOK, "route:GET /api/items/{id}"},
		{"r.Use in r.Route: the mount's pattern", func(r chi.Router, mw func(http.Handler) http.Handler) {
			r.Route("/api", func(r chi.Router) {
				r.Use(mw)
				r.Get("/items/{id}", ok)
			})
		}, http.StatusOK, "route:GET /api/*"},
		{"r.Use in r.Group in r.Route", func(r chi.Router, mw func(http.Handler) http.Handler) {
			r.Route("/api", func(r chi.Router) {
				r.Group(func(r chi.Router) {
					r.Use(mw)
					r.Get("/items/{id}", ok)
				})
			})
		}, http.StatusOK, "route:GET /api/items/{id}"},
		{"r.With in a mounted router", func(r chi.Router, mw func(http.Handler) http.Handler) {
			api := chi.NewRouter()
			api.With(mw).Get("/items/{id}", ok)
			r.Mount("/api", api)
		}, http.StatusOK, "route:GET /api/items/{id}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim, err := core.NewMemory(core.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			var got string
			route := keyfunc.Route()
			mw := httplimit.New(lim, core.PerMinute(10), func(r keyfunc.Request) (string, error) {
				k, err := route(r)
				got = k
				return k, err
			})
			r := chi.NewRouter()
			tc.routes(r, mw)
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/items/7", nil))
			if rec.Code != tc.status || got != tc.key {
				t.Errorf("GET /api/items/7: %d with key %q, want %d with key %q", rec.Code, got, tc.status, tc.key)
			}
		})
	}
}
