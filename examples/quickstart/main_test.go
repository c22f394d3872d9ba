package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
)

func TestRun(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	// The bucket holds 10 and refills one every 100ms: the 15 requests
	// take a few milliseconds, so 10 pass, or 11 on a very slow machine.
	m := regexp.MustCompile(`: (\d+) in all, the limit's burst of 10`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no summary line in the output:\n%s", out.String())
	}
	if n, _ := strconv.Atoi(m[1]); n < 10 || n > 11 {
		t.Errorf("%d of 15 admitted, want 10 (the burst):\n%s", n, out.String())
	}
}
