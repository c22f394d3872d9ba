package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/examples/internal/smoketest"
)

func TestRun(t *testing.T) {
	out := smoketest.Start(t, run, "-addr", "127.0.0.1:0")
	smoketest.Curl(t, out.String())
	base := smoketest.Base(t, out.String())
	client := smoketest.Client()

	// The free plan: 60 a minute, one of them spent by the curl lines.
	free := http.Header{"X-Api-Key": {"acme-free-key"}}
	var codes []int
	for range 62 {
		code, h, err := smoketest.Do(client, "GET", base+"/reports", free)
		if err != nil {
			t.Fatal(err)
		}
		if code == http.StatusOK && h.Get("X-RateLimit-Limit") != "60" {
			t.Fatalf("free plan: X-RateLimit-Limit %q, want 60 (the dry run must not replace it)", h.Get("X-RateLimit-Limit"))
		}
		codes = append(codes, code)
	}
	// 59 are left, and the bucket refills one a second as the loop runs.
	// One fewer is allowed for: a decision whose answer a pause of this
	// process outlived is sent once more, and may then be charged twice
	// (the library errs toward denying; CI's busy machines pause tests).
	ok := 0
	for ok < len(codes) && codes[ok] == http.StatusOK {
		ok++
	}
	if ok < 58 || codes[61] != http.StatusTooManyRequests {
		t.Errorf("free plan, 62 requests after one: statuses %v, want 200 for the first 58 or 59 and 429 at the end", codes)
	}
	if !strings.Contains(out.String(), "dry run: would have denied") {
		t.Error("the dry run logged no denial past 50 requests")
	}

	// /login: 5 a minute, then a 15-minute lock.
	for i, want := range []int{200, 200, 200, 200, 200, 429, 429} {
		code, h, err := smoketest.Do(client, "POST", base+"/login", nil)
		if err != nil {
			t.Fatal(err)
		}
		if code != want {
			t.Fatalf("login attempt %d: status %d, want %d", i+1, code, want)
		}
		if code == http.StatusTooManyRequests {
			if s, _ := strconv.Atoi(h.Get("Retry-After")); s < 890 {
				t.Errorf("login attempt %d: Retry-After %q, want about 900 (the lock)", i+1, h.Get("Retry-After"))
			}
		}
	}
}
