package main

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/examples/internal/smoketest"
)

// wait is how many tokens may refill while the test runs: three seconds'
// worth, at one every 60ms.
const wait = 50

func TestRun(t *testing.T) {
	out := smoketest.Start(t, run, "-addr", "127.0.0.1:0")
	if n := smoketest.Curl(t, out.String()); n != 5 {
		t.Errorf("replayed %d curl lines, want 5", n)
	}
	// 80 + 160 + 40 tokens were charged: the next answer's fields say what
	// is left after reserving 1, 719, plus what refilled meanwhile (one
	// token every 60ms).
	base := smoketest.Base(t, out.String())
	code, h, err := smoketest.Do(smoketest.Client(), "POST", base+"/complete?max_tokens=1&prompt=x", http.Header{"X-Tenant-Id": {"acme"}})
	if err != nil || code != http.StatusOK {
		t.Fatalf("after the replay: %d, %v; want 200", code, err)
	}
	var left int
	if _, err := fmt.Sscanf(h.Get("RateLimit"), `"tokens";r=%d;`, &left); err != nil || left < 719 || left > 719+wait {
		t.Errorf("after the replay: RateLimit %q, want r from 719 to %d", h.Get("RateLimit"), 719+wait)
	}
}
