package main

import (
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/examples/internal/smoketest"
)

func TestRun(t *testing.T) {
	out := smoketest.Start(t, run, "-addr", "127.0.0.1:0")
	if n := smoketest.Curl(t, out.String()); n != 9 {
		t.Errorf("replayed %d curl lines, want 9", n)
	}
	// Another user is not locked out by alice's failures, and a success's
	// fields say the failures it has left: all three.
	base := smoketest.Base(t, out.String())
	code, h, err := smoketest.Do(smoketest.Client(), "POST", base+"/login", http.Header{"Authorization": {"Basic Ym9iOnNlY3JldA=="}}) // bob:secret
	if err != nil || code != http.StatusUnauthorized || h.Get("X-RateLimit-Remaining") != "2" {
		t.Errorf("bob's first failure: %d, remaining %q, %v; want 401 and 2", code, h.Get("X-RateLimit-Remaining"), err)
	}
}
