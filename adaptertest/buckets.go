package adaptertest

import (
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/redistest"
)

// bucketScenarios are the cases of bucket identity (see package policy's
// documentation): a middleware is one budget per key across the routes it
// guards, unless it counts per route (WithPerRoute) or names a scope or
// route; buckets are named by the limits and that choice, never by where
// or in what order a middleware was made. The builder makes every
// middleware at one line of its own code, in the order of the routes: a
// name taken from the line or the order would merge what must stay apart.
func bucketScenarios() []Scenario {
	perIP := func(n int) *Middleware { return &Middleware{Limit: core.PerMinute(n), Key: keyfunc.IP()} }
	// A middleware for the whole app never counts per route here: fiber's
	// App.Use runs before routing and sees no route (httplimit's and the
	// policy's tests check WithPerRoute on a group).
	perRouteIP := func(n int) *Middleware { m := perIP(n); m.PerRoute = true; return m }
	page := perRouteIP(2)
	three := []Route{
		{Method: "GET", Pattern: "/orders"},
		{Method: "GET", Pattern: "/invoices"},
		{Method: "GET", Pattern: "/items/{id}"},
	}
	return []Scenario{
		{
			Name:    "a group middleware across three routes admits one budget",
			Limiter: Memory,
			Use:     perIP(3),
			Routes:  three,
			Steps: []Step{
				{Request: get("/orders"), Want: Want{Status: 200}},
				{Request: get("/invoices"), Want: Want{Status: 200}},
				{Request: get("/items/1"), Want: Want{Status: 200}},
				{Request: get("/orders"), Want: Want{Status: 429}},
				{Request: get("/invoices"), Want: Want{Status: 429}},
				{Request: get("/items/2"), Want: Want{Status: 429}},
				// Another client: its own budget.
				{Request: Request{Path: "/orders", RemoteAddr: "198.51.100.4:1"}, Want: Want{Status: 200}},
			},
		},
		{
			Name:    "a route middleware counts for its route, apart from the group's",
			Limiter: Memory,
			Use:     perIP(3),
			Routes: []Route{
				{Method: "GET", Pattern: "/search", Middleware: perIP(1)},
				{Method: "GET", Pattern: "/orders"},
			},
			Steps: []Step{
				{Request: get("/search"), Want: Want{Status: 200}}, // the group's 1 of 3, the route's 1 of 1
				{Request: get("/search"), Want: Want{Status: 429}}, // the group's 2 of 3; the route's spent
				{Request: get("/orders"), Want: Want{Status: 200}}, // the group's 3 of 3
				{Request: get("/orders"), Want: Want{Status: 429}},
			},
		},
		{
			Name:    "a helper's middlewares on two routes keep apart buckets per route",
			Limiter: Memory,
			Routes: []Route{
				{Method: "GET", Pattern: "/orders", Middleware: perRouteIP(1)},
				{Method: "GET", Pattern: "/invoices", Middleware: perRouteIP(1)},
			},
			Steps: []Step{
				{Request: get("/orders"), Want: Want{Status: 200}},
				{Request: get("/orders"), Want: Want{Status: 429}},
				{Request: get("/invoices"), Want: Want{Status: 200}},
				{Request: get("/invoices"), Want: Want{Status: 429}},
			},
		},
		{
			Name:    "a helper's middlewares naming their routes keep apart buckets",
			Limiter: Memory,
			Routes: []Route{
				{Method: "GET", Pattern: "/orders", Middleware: &Middleware{Limit: core.PerMinute(1), Key: keyfunc.IP(), Route: "GET /orders"}},
				{Method: "GET", Pattern: "/invoices", Middleware: &Middleware{Limit: core.PerMinute(1), Key: keyfunc.IP(), Route: "GET /invoices"}},
			},
			Steps: []Step{
				{Request: get("/orders"), Want: Want{Status: 200}},
				{Request: get("/orders"), Want: Want{Status: 429}},
				{Request: get("/invoices"), Want: Want{Status: 200}},
				{Request: get("/invoices"), Want: Want{Status: 429}},
			},
		},
		{
			Name:    "per route, HEAD counts as GET",
			Limiter: Memory,
			Routes: []Route{
				{Method: "GET", Pattern: "/page", Middleware: page},
				{Method: "HEAD", Pattern: "/page", Middleware: page},
			},
			Steps: []Step{
				{Request: get("/page"), Want: Want{Status: 200}},
				{Request: Request{Method: "HEAD", Path: "/page"}, Want: Want{Status: 200}},
				{Request: get("/page"), Want: Want{Status: 429}},
				{Request: Request{Method: "HEAD", Path: "/page"}, Want: Want{Status: 429}},
			},
		},
		{
			Name:    "requests that match no route share one bucket",
			Limiter: Memory,
			Use:     perIP(3),
			Routes:  []Route{{Method: "GET", Pattern: "/items/{id}"}},
			Steps: []Step{
				{Request: get("/wp-login.php"), Want: Want{Status: 404}},
				{Request: get("/.env"), Want: Want{Status: 404}},
				{Request: get("/a/b/c"), Want: Want{Status: 404}},
				{Request: get("/admin"), Want: Want{Status: 429}},
				{Request: get("/" + strconv.Itoa(404)), Want: Want{Status: 429}},
				// Another client: its own bucket.
				{Request: Request{Path: "/admin", RemoteAddr: "198.51.100.4:1"}, Want: Want{Status: 404}},
			},
		},
		{
			Name:    "a penalty on one route and none on another, one engine",
			Limiter: Frozen,
			Routes: []Route{
				{Method: "POST", Pattern: "/login", Middleware: &Middleware{Limit: core.PerMinute(1), Key: keyfunc.IP(), Penalty: 15 * time.Minute, PerRoute: true}},
				{Method: "GET", Pattern: "/search", Middleware: perRouteIP(1)},
			},
			Steps: []Step{
				{Request: Request{Method: "POST", Path: "/login"}, Want: Want{Status: 200}},
				{Request: Request{Method: "POST", Path: "/login"}, Want: Want{Status: 429, Header: map[string]string{"Retry-After": "900"}}},
				{Request: Request{Method: "POST", Path: "/login"}, Want: Want{Status: 429, Header: map[string]string{"Retry-After": "900"}}},
				{Request: get("/search"), Want: Want{Status: 200}},
				{Request: get("/search"), Want: Want{Status: 429, Header: map[string]string{"Retry-After": "60"}}},
			},
		},
	}
}

// checkRollingDeploy serves one service from two builds at once, as a
// rolling deploy does, each on a limiter of its own against one real Redis
// ([redistest.Addr]; skipped without one, except under CI): the second
// build has its routes in another order, so its middlewares are made in
// another order, and a route more, added first. Requests alternate between
// the builds: a limit holds as if one build served them all, and a penalty
// lock set through one build holds in the other.
func checkRollingDeploy(t *testing.T, build Build) {
	addr := redistest.Addr(t)
	prefix := fmt.Sprintf("adaptertest:deploy:%d:", time.Now().UnixNano()) // this run's own, in case the Redis is shared
	replica := func() *core.Limiter {
		// A generous budget: a paused test must not decide in the local fallback.
		lim, err := core.New(redistest.NewClient(t, addr), core.WithPrefix(prefix), core.WithTimeout(5*time.Second), core.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatalf("core.New() = %v", err)
		}
		t.Cleanup(func() { _ = lim.Close() })
		return lim
	}
	orders := func() Route {
		return Route{Method: "GET", Pattern: "/orders/{id}", Middleware: &Middleware{Limit: core.PerMinute(3), Key: keyfunc.IP()}}
	}
	login := func() Route {
		return Route{Method: "POST", Pattern: "/login", Middleware: &Middleware{Limit: core.PerMinute(2), Key: keyfunc.IP(), Penalty: time.Hour}}
	}
	health := Route{Method: "GET", Pattern: "/healthz"}
	builds := [2]Serve{
		build(t, App{Limiter: replica(), Routes: []Route{orders(), login()}}),
		build(t, App{Limiter: replica(), Routes: []Route{health, login(), orders()}}),
	}
	for i, st := range []struct {
		build  int
		method string
		path   string
		want   int
		locked bool // Retry-After says the lock's hour
	}{
		{0, "GET", "/orders/1", 200, false},
		{1, "GET", "/orders/2", 200, false},
		{0, "GET", "/orders/3", 200, false},
		{1, "GET", "/orders/4", 429, false},
		{0, "GET", "/orders/5", 429, false},
		{1, "POST", "/login", 200, false},
		{0, "POST", "/login", 200, false},
		{1, "POST", "/login", 429, true},
		{0, "POST", "/login", 429, true},
		{1, "GET", "/healthz", 200, false},
	} {
		got := do(builds[st.build], Step{Request: Request{Method: st.method, Path: st.path}})
		if got.Status != st.want {
			t.Errorf("request %d, build %d: %s %s: status %d, want %d", i+1, st.build+1, st.method, st.path, got.Status, st.want)
			continue
		}
		if st.locked {
			if s, err := strconv.Atoi(got.Header.Get("Retry-After")); err != nil || s < 3500 {
				t.Errorf("request %d, build %d: %s %s: Retry-After %q, want the hour of the penalty lock", i+1, st.build+1, st.method, st.path, got.Header.Get("Retry-After"))
			}
		}
	}
}

// checkTwins serves two routes, each through a middleware of its own with
// the same limit and key function and no scope, as a helper makes them:
// they count apart, or they share one budget and one warning on the
// limiter's log names both routes and the fix.
func checkTwins(t *testing.T, build Build) {
	lim, log := Logged(t)
	twin := func() *Middleware { return &Middleware{Limit: core.PerMinute(1), Key: keyfunc.IP()} }
	serve := build(t, App{Limiter: lim, Routes: []Route{
		{Method: "GET", Pattern: "/orders", Middleware: twin()},
		{Method: "GET", Pattern: "/invoices", Middleware: twin()},
	}})
	if got := do(serve, Step{Request: get("/orders")}); got.Status != 200 {
		t.Fatalf("GET /orders: status %d, want 200", got.Status)
	}
	if got := do(serve, Step{Request: get("/invoices")}); got.Status == 200 {
		return // apart
	}
	checkSharedLogged(t, log, "GET /orders", "GET /invoices")
}
