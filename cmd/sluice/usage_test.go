package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/redistest"
)

// TestUsageResetReady: on a real Redis, usage shows what a middleware's
// key has left, in the middleware's scope (none by default, a route's with
// WithPerRoute); reset gives the key full buckets again; ready says the
// server is ready, and exits 1 once it is gone; bad arguments exit 2.
func TestUsageResetReady(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	lim, err := core.New(redistest.NewClient(t, addr), core.WithPrefix("clitest:"), core.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })

	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	mux := http.NewServeMux()
	mux.Handle("GET /orders", ok)
	group := httplimit.New(lim, core.PerMinute(10), keyfunc.Tenant("X-Tenant"))(mux)
	perRoute := httplimit.New(lim, core.PerMinute(2), keyfunc.Tenant("X-Tenant"), httplimit.WithPerRoute(true))(mux)
	send := func(h http.Handler, n int) {
		for range n {
			r := httptest.NewRequest("GET", "/orders", nil)
			r.Header.Set("X-Tenant", "acme")
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
	}
	send(group, 3)
	send(perRoute, 3) // the third is denied

	for _, st := range []struct {
		args    []string
		code    int
		out     string // a substring of standard output
		errText string // a substring of standard error
	}{
		{[]string{"usage", "tenant:acme", "10/m"}, 0, "tenant:acme under 10/m: 7 of 10 left, full in ", ""},
		{[]string{"usage", "tenant:acme", "2/m", "route:GET /orders"}, 0, `in scope "route:GET /orders": 0 of 2 left, full in 1m0s; next admitted in 30s`, ""},
		{[]string{"usage", "tenant:other", "10/m"}, 0, "10 of 10 left", ""},
		{[]string{"reset", "tenant:acme", "2/m", "route:GET /orders"}, 0, `tenant:acme reset under 2/m in scope "route:GET /orders"`, ""},
		{[]string{"usage", "tenant:acme", "2/m", "route:GET /orders"}, 0, "2 of 2 left, full in 0s\n", ""},
		{[]string{"usage", "tenant:acme", "10/m"}, 0, "7 of 10 left", ""}, // the other scope's, untouched
		{[]string{"ready"}, 0, "ready\n", ""},
		{[]string{"usage", "tenant:acme"}, 2, "", "usage takes <key> <limits> [<scope>], got 1 arguments"},
		{[]string{"usage", "tenant:acme", "allow"}, 2, "", `"allow" is not limits`},
		{[]string{"reset", "tenant:acme", "0/m"}, 2, "", "invalid limit"},
		{[]string{"reset", "", "10/m"}, 2, "", "empty key"},
		{[]string{"usage", "tenant:acme", "10/m", ""}, 2, "", "empty scope"},
		{[]string{"ready", "now"}, 2, "", "ready takes no arguments"},
	} {
		code, out, errOut := sluice(t, addr, st.args...)
		if code != st.code || !strings.Contains(out, st.out) || !strings.Contains(errOut, st.errText) {
			t.Errorf("sluice %q = %d, stdout %q, stderr %q; want %d, %q, %q", st.args, code, out, errOut, st.code, st.out, st.errText)
		}
	}
	// The middleware sees the reset: its route has its 2 again, once its
	// deny cache asks Redis again (within a second; see core.Limiter.Reset).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/orders", nil)
		r.Header.Set("X-Tenant", "acme")
		perRoute.ServeHTTP(rec, r)
		if rec.Code == 200 {
			if got := rec.Header().Get("X-RateLimit-Remaining"); got != "1" {
				t.Errorf("after reset: remaining %q, want 1", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reset: status %d, want 200 within the deny cache's second", rec.Code)
		}
	}

	srv.Kill()
	if code, out, errOut := sluice(t, addr, "ready"); code != 1 || out != "" || !strings.Contains(errOut, "store unavailable") {
		t.Errorf("ready with Redis down = %d, %q, %q; want 1 and the store unavailable", code, out, errOut)
	}
}

// TestPathUsageReset: on a real Redis, path usage shows each level's
// remaining of a PathRule whose organisation has a calendar month's
// quota; path reset empties the levels its keys name, and no others.
func TestPathUsageReset(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	lim, err := core.New(redistest.NewClient(t, addr), core.WithPrefix("clitest:"), core.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	org, user := "org=1000/calendar-month zone UTC", "user=6/m burst 5"
	pr, err := lim.PreparePath("api",
		core.Level{Name: "org", Limits: []core.Limit{core.MustParseLimit("1000/calendar-month zone UTC")}},
		core.Level{Name: "user", Limits: []core.Limit{core.MustParseLimit("6/m burst 5")}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if res, err := pr.Allow(t.Context(), "acme", "alice"); err != nil || !res.Allowed {
			t.Fatalf("Allow = %+v, %v", res, err)
		}
	}
	for _, st := range []struct {
		args    []string
		code    int
		out     string // a substring of standard output
		errText string // a substring of standard error
	}{
		{[]string{"path", "usage", "api", org, user, "--", "acme", "alice"}, 0, "org acme: 997 of 1000 left, full in ", ""},
		{[]string{"path", "usage", "api", org, user, "--", "acme", "alice"}, 0, "user alice: 2 of 5 left", ""},
		{[]string{"path", "reset", "api", org, user, "--", "acme"}, 0, "path acme reset at levels org in scope api\n", ""},
		{[]string{"path", "usage", "api", org, user, "--", "acme", "alice"}, 0, "org acme: 1000 of 1000 left, full in 0s\nuser alice: 2 of 5 left", ""},
		{[]string{"path", "reset", "api", org, user, "--", "acme", "alice"}, 0, "reset at levels org, user", ""},
		{[]string{"path", "usage", "api", org, user, "--", "acme", "alice"}, 0, "user alice: 5 of 5 left", ""},
		{[]string{"path", "usage", "api", org, "--", "acme", "alice"}, 2, "", "2 keys for 1 levels"},
		{[]string{"path", "usage", "api", "org", "--", "acme"}, 2, "", "is not <name>=<limits>"},
		{[]string{"path", "usage", "api", org, "acme"}, 2, "", "takes a scope, its levels as <name>=<limits>, then -- and the path's keys"},
		{[]string{"path", "peek"}, 2, "", "path needs usage or reset"},
	} {
		code, out, errOut := sluice(t, addr, st.args...)
		if code != st.code || !strings.Contains(out, st.out) || !strings.Contains(errOut, st.errText) {
			t.Errorf("sluice %q = %d, stdout %q, stderr %q; want %d, %q, %q", st.args, code, out, errOut, st.code, st.out, st.errText)
		}
	}
}
