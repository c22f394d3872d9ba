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
