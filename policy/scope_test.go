package policy

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestBucketIdentity: a middleware without a scope is one budget per key
// across the routes it guards; WithPerRoute(true) names its buckets by the
// request's route (HEAD counted as GET, every unmatched request under one
// name); WithScope and WithRoute by a name. None depends on where or in
// what order the middleware was made. Each case makes its middlewares
// (named a, b, ...) on one engine, allowing one request a minute on one
// static key, and sends requests in order.
func TestBucketIdentity(t *testing.T) {
	type send struct {
		mw     string // which middleware
		method string // "" for GET
		route  string
		allow  bool
	}
	perRoute := []opt{WithPerRoute[req, struct{}](true)}
	for _, tc := range []struct {
		name  string
		mws   map[string][]opt
		sends []send
	}{
		{
			name: "one middleware on three routes (a group): one budget",
			mws:  map[string][]opt{"a": nil},
			sends: []send{
				{"a", "", "/orders", true}, {"a", "", "/invoices", false}, {"a", "", "/items", false},
			},
		},
		{
			name: "per route: two middlewares, two routes: apart",
			mws:  map[string][]opt{"a": perRoute, "b": perRoute},
			sends: []send{
				{"a", "", "/orders", true}, {"a", "", "/orders", false},
				{"b", "", "/invoices", true}, {"b", "", "/invoices", false},
			},
		},
		{
			name: "per route: one middleware on two routes: a budget per route",
			mws:  map[string][]opt{"a": perRoute},
			sends: []send{
				{"a", "", "/orders", true}, {"a", "", "/invoices", true},
				{"a", "", "/orders", false},
			},
		},
		{
			name: "per route: two middlewares, one route (two builds): one bucket",
			mws:  map[string][]opt{"a": perRoute, "b": perRoute},
			sends: []send{
				{"a", "", "/orders", true}, {"b", "", "/orders", false},
			},
		},
		{
			name: "two middlewares without a scope, one route (two builds): one bucket",
			mws:  map[string][]opt{"a": nil, "b": nil},
			sends: []send{
				{"a", "", "/orders", true}, {"b", "", "/orders", false},
			},
		},
		{
			name: "per route: HEAD counts as GET",
			mws:  map[string][]opt{"a": perRoute},
			sends: []send{
				{"a", "HEAD", "/page", true}, {"a", "GET", "/page", false},
				{"a", "HEAD", "HEAD /page", false}, // a net/http route for HEAD alone
				{"a", "POST", "/page", true},
			},
		},
		{
			name: "per route: unmatched requests share one bucket",
			mws:  map[string][]opt{"a": perRoute, "b": perRoute},
			sends: []send{
				{"a", "", "", true}, {"a", "POST", "", false}, {"b", "", "", false},
				{"a", "", "/orders", true},
			},
		},
		{
			name: "WithRoute names the route a per-route middleware would count in",
			mws:  map[string][]opt{"a": {WithRoute[req, struct{}]("GET /orders")}, "b": {WithRoute[req, struct{}]("GET /invoices")}, "c": perRoute},
			sends: []send{
				{"a", "", "", true}, {"a", "", "", false}, {"b", "", "", true},
				{"c", "", "/orders", false}, {"c", "", "/invoices", false}, {"c", "", "/items", true},
			},
		},
		{
			name: "one scope over two routes and two middlewares: one bucket",
			mws:  map[string][]opt{"a": {WithScope[req, struct{}]("api")}, "b": {WithScope[req, struct{}]("api")}, "c": {WithScope[req, struct{}]("other")}},
			sends: []send{
				{"a", "", "/orders", true}, {"a", "", "/invoices", false}, {"b", "", "/orders", false},
				{"c", "", "/orders", true},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim, err := core.NewMemory(core.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			mws := map[string]*Policy{}
			for name, opts := range tc.mws {
				p, _, err := New(lim, core.PerMinute(1), keyfunc.Static("all"), self, opts...)
				if err != nil {
					t.Fatal(err)
				}
				mws[name] = p
			}
			for i, s := range tc.sends {
				v := mws[s.mw].Decide(context.Background(), fakeReq{method: s.method, route: s.route})
				if got := v.Action == Continue; got != s.allow {
					t.Errorf("request %d: %s %s %q: allowed %v, want %v", i+1, s.mw, s.method, s.route, got, s.allow)
				}
			}
		})
	}
}

// TestSharedBudgetLogged: two middlewares without a scope, with the same
// limits, first seen on two routes for keys of one kind, are named in one
// log line with the fix; not when their keys are of two kinds, when one
// has a scope, when they count per route, or when they share a route.
func TestSharedBudgetLogged(t *testing.T) {
	ip, tenant := keyfunc.IP(), keyfunc.Tenant("X-Tenant")
	for _, tc := range []struct {
		name   string
		keys   [2]keyfunc.Func
		opts   [2][]opt
		routes [2]string
		logged bool
	}{
		{"same limits and key kind, two routes", [2]keyfunc.Func{ip, ip}, [2][]opt{}, [2]string{"/orders", "/invoices"}, true},
		{"two key kinds", [2]keyfunc.Func{ip, tenant}, [2][]opt{}, [2]string{"/orders", "/invoices"}, false},
		{"one route", [2]keyfunc.Func{ip, ip}, [2][]opt{}, [2]string{"/orders", "/orders"}, false},
		{"a scope", [2]keyfunc.Func{ip, ip}, [2][]opt{{WithScope[req, struct{}]("orders")}, nil}, [2]string{"/orders", "/invoices"}, false},
		{"per route", [2]keyfunc.Func{ip, ip}, [2][]opt{{WithPerRoute[req, struct{}](true)}, {WithPerRoute[req, struct{}](true)}}, [2]string{"/orders", "/invoices"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &lines{}
			lim, err := core.NewMemory(core.WithLogger(slog.New(log)))
			if err != nil {
				t.Fatal(err)
			}
			var ps [2]*Policy
			for i := range ps {
				if ps[i], _, err = New(lim, core.PerMinute(5), tc.keys[i], self, tc.opts[i]...); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 { // logged once
				for i, p := range ps {
					p.Decide(context.Background(), fakeReq{route: tc.routes[i], headers: map[string]string{"X-Tenant": "acme"}})
				}
			}
			var said []string
			for _, l := range log.got {
				if strings.Contains(l, "share one budget") {
					said = append(said, l)
				}
			}
			if !tc.logged {
				if len(said) != 0 {
					t.Errorf("logged %q, want nothing", said)
				}
				return
			}
			if len(said) != 1 {
				t.Fatalf("logged %q, want one line", said)
			}
			for _, want := range []string{"first=GET /orders", "second=GET /invoices", "WithScope", "WithPerRoute(true)"} {
				if !strings.Contains(said[0], want) {
					t.Errorf("log line %q lacks %q", said[0], want)
				}
			}
		})
	}
}

// TestPerRouteWithoutRoutes: a per-route middleware whose first request
// has no route warns once, naming WithRoute; one that has seen a route
// does not.
func TestPerRouteWithoutRoutes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		routes []string
		warned bool
	}{
		{"only unmatched", []string{"", "", ""}, true},
		{"a route first", []string{"/orders", "", ""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &lines{}
			lim, err := core.NewMemory(core.WithLogger(slog.New(log)))
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := New(lim, core.PerMinute(5), keyfunc.IP(), self, WithPerRoute[req, struct{}](true))
			if err != nil {
				t.Fatal(err)
			}
			for _, rt := range tc.routes {
				p.Decide(context.Background(), fakeReq{route: rt})
			}
			n := 0
			for _, l := range log.got {
				if strings.Contains(l, "route:unmatched") {
					n++
					if !strings.Contains(l, "WithRoute(") {
						t.Errorf("warning %q does not name WithRoute", l)
					}
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.warned]; n != want {
				t.Errorf("%d warnings in %q, want %d", n, log.got, want)
			}
		})
	}
}

// TestScopeOptionsRefused: contradicting or empty scope options are
// refused with an error naming them.
func TestScopeOptionsRefused(t *testing.T) {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts []opt
		want string
	}{
		{[]opt{WithScope[req, struct{}]("")}, "WithScope: empty scope"},
		{[]opt{WithRoute[req, struct{}]("")}, "WithRoute: empty pattern"},
		{[]opt{WithScope[req, struct{}]("a"), WithRoute[req, struct{}]("GET /a")}, "WithScope and WithRoute"},
		{[]opt{WithPerRoute[req, struct{}](true), WithScope[req, struct{}]("a")}, "WithPerRoute(true)"},
		{[]opt{WithRoute[req, struct{}]("GET /a"), WithPerRoute[req, struct{}](true)}, "WithPerRoute(true)"},
	} {
		if _, _, err := New(lim, core.PerMinute(1), keyfunc.IP(), self, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with %d scope options: %v, want an error with %q", len(tc.opts), err, tc.want)
		}
	}
}

// TestScopeIsPrepareScoped: WithScope(x) draws on the buckets of the
// engine's PrepareScoped(x, ...), no scope on those of Prepare (the empty
// scope), and per route or WithRoute on those of PrepareScoped with the
// route's key.
func TestScopeIsPrepareScoped(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		scope string // the engine's
		opts  []opt
		route string
	}{
		{"login", []opt{WithScope[req, struct{}]("login")}, "/login"},
		{"", nil, "/login"},
		{"route:GET /login", []opt{WithPerRoute[req, struct{}](true)}, "/login"},
		{"route:GET /login", []opt{WithRoute[req, struct{}]("GET /login")}, ""},
		{"route:unmatched", []opt{WithPerRoute[req, struct{}](true)}, ""},
	} {
		lim, err := core.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		p, _, err := New(lim, core.PerMinute(1), keyfunc.Static("all"), self, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		rule, err := lim.PrepareScoped(tc.scope, core.PerMinute(1))
		if err != nil {
			t.Fatal(err)
		}
		if res, err := rule.Allow(ctx, "static:all"); err != nil || !res.Allowed {
			t.Fatalf("PrepareScoped(%q).Allow = %+v, %v", tc.scope, res, err)
		}
		if v := p.Decide(ctx, fakeReq{route: tc.route}); v.Action != Deny {
			t.Errorf("scope %q: the middleware's request after the engine's took the token: %v, want Deny", tc.scope, v.Action)
		}
	}
}

// TestWithPenalty: a penalty on one middleware locks its keys; another on
// the same engine without one locks nothing; WithPenalty(0) lifts the
// engine's; out-of-range penalties are refused.
func TestWithPenalty(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		engine  time.Duration
		opts    []opt
		locked  bool
		minWait time.Duration
	}{
		{"middleware penalty", 0, []opt{WithPenalty[req, struct{}](time.Hour)}, true, time.Hour},
		{"no penalty", 0, nil, false, 0},
		{"engine penalty", time.Hour, nil, true, time.Hour},
		{"engine penalty lifted", time.Hour, []opt{WithPenalty[req, struct{}](0)}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim, err := core.NewMemory(core.WithPenalty(tc.engine))
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := New(lim, core.PerMinute(1), keyfunc.Static("all"), self, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			r := fakeReq{route: "/login"}
			p.Decide(ctx, r)
			v := p.Decide(ctx, r)
			if v.Action != Deny || v.Result.Locked != tc.locked || v.Result.RetryAfter < tc.minWait {
				t.Errorf("second request: %v, Locked %v, RetryAfter %s; want Deny, locked %v, at least %s", v.Action, v.Result.Locked, v.Result.RetryAfter, tc.locked, tc.minWait)
			}
		})
	}
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{-time.Second, core.MaxPenalty + time.Second} {
		if _, _, err := New(lim, core.PerMinute(1), keyfunc.Static("all"), self, WithPenalty[req, struct{}](d)); err == nil || !strings.Contains(err.Error(), "WithPenalty") {
			t.Errorf("WithPenalty(%s): %v, want an error naming it", d, err)
		}
	}
	if _, _, err := New(lim, core.PerMinute(1), keyfunc.Static("all"), self, WithScope[req, struct{}]("")); err == nil || !strings.Contains(err.Error(), "WithScope: empty scope") {
		t.Errorf("an empty WithScope: %v, want an error naming it", err)
	}
}
