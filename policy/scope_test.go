package policy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestBucketIdentity: a middleware's buckets are named by the request's
// route (HEAD counted as GET, every unmatched request under one name) or
// by WithScope, never by where or in what order the middleware was made.
// Each case makes its middlewares (named a, b, ...) on one engine, allowing
// one request a minute on one static key, and sends requests in order.
func TestBucketIdentity(t *testing.T) {
	type send struct {
		mw     string // which middleware
		method string // "" for GET
		route  string
		allow  bool
	}
	for _, tc := range []struct {
		name  string
		mws   map[string][]opt
		sends []send
	}{
		{
			name: "two middlewares, two routes: apart",
			mws:  map[string][]opt{"a": nil, "b": nil},
			sends: []send{
				{"a", "", "/orders", true}, {"a", "", "/orders", false},
				{"b", "", "/invoices", true}, {"b", "", "/invoices", false},
			},
		},
		{
			name: "one middleware on two routes (a group): a budget per route",
			mws:  map[string][]opt{"a": nil},
			sends: []send{
				{"a", "", "/orders", true}, {"a", "", "/invoices", true},
				{"a", "", "/orders", false},
			},
		},
		{
			name: "two middlewares, one route (two builds): one bucket",
			mws:  map[string][]opt{"a": nil, "b": nil},
			sends: []send{
				{"a", "", "/orders", true}, {"b", "", "/orders", false},
			},
		},
		{
			name: "HEAD counts as GET",
			mws:  map[string][]opt{"a": nil},
			sends: []send{
				{"a", "HEAD", "/page", true}, {"a", "GET", "/page", false},
				{"a", "HEAD", "HEAD /page", false}, // a net/http route for HEAD alone
				{"a", "POST", "/page", true},
			},
		},
		{
			name: "unmatched requests share one bucket",
			mws:  map[string][]opt{"a": nil, "b": nil},
			sends: []send{
				{"a", "", "", true}, {"a", "POST", "", false}, {"b", "", "", false},
				{"a", "", "/orders", true},
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
			lim, err := core.NewMemory()
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

// TestScopeIsPrepareScoped: WithScope(x) draws on the buckets of the
// engine's PrepareScoped(x, ...), and the default scope on those of
// PrepareScoped with the route's key.
func TestScopeIsPrepareScoped(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		scope string // the engine's
		opts  []opt
		route string
	}{
		{"login", []opt{WithScope[req, struct{}]("login")}, "/login"},
		{"route:GET /login", nil, "/login"},
		{"route:unmatched", nil, ""},
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
