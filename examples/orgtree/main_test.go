package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
)

// TestRun replays the story and checks what each level decided.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		// 1. the user level denies alice's 4th request.
		`alice #3 +200  RateLimit: "user.burst";r=0`,
		`alice #4 +429  RateLimit: "user.burst";r=0;t=\d+  Retry-After: \d+s  violated-policies: \["user.burst"\]`,
		// 2. her upgrade applies at once, on new buckets for her new limits.
		`alice #5 +200`,
		`alice #6 +200`,
		// 3. two exports in flight on one API key: the third is refused.
		`export #3 +429  RateLimit: "in-flight";r=0  Retry-After: 1s  violated-policies: \["in-flight"\]`,
		`export #1 \(once finished\) +200`,
		`export #2 \(once finished\) +200`,
		// 4. carol's denial charged globex nothing: dave gets 2 of its 5.
		`carol #4 +429 .*violated-policies: \["user.burst"\]`,
		`dave #2 +200  RateLimit: "org.monthly";r=0`,
		`dave #3 +429  RateLimit: "org.monthly";r=0;t=\d+  Retry-After: \d+s  violated-policies: \["org.monthly"\]`,
		`globex's quota is full again at \d{4}-\d\d-01 00:00 E[SD]T`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
