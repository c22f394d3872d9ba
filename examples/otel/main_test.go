package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRun runs the example on an in-memory limiter and finds the decisions
// in the exporter's output.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, ""); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"Name": "sluice.rate_limiting.requests"`, `"Value": "denied"`, `"Value": "api"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the exporter's output lacks %s:\n%s", want, out.String())
		}
	}
}
