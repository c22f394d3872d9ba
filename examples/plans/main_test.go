package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// TestRun runs the demo on an embedded miniredis (or REDIS_ADDR's Redis):
// the upgrade reaches every replica, and the deny entry cuts mallory off
// on every replica, at once on the one it was set through.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-refresh", "50ms"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"acme, 7 requests over the replicas: 200 200 200 200 200 429 429\n",
		"replica 1 answers acme under 50/m name pro after ",
		"replica 2 answers acme under 50/m name pro after ",
		"replica 3 answers acme under 50/m name pro after ",
		"acme, 6 more requests: 200 200 200 200 200 200\n",
		"replica 3 refuses mallory (403) after ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// Replica 1, through which the entry was set, refuses at once.
	if !regexp.MustCompile(`replica 1 refuses mallory \(403\) after \S+, at request 1\n`).MatchString(got) {
		t.Errorf("replica 1 did not refuse mallory at its first request:\n%s", got)
	}
}
