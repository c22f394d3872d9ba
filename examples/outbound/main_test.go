package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestRun runs the example for two windows: it ends, says what each
// window saw, and the pause it shows let through the 429 alone.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-windows", "2"}, &out); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	for _, want := range []string{"window 0:", "window 1:", "limit learned: 49/1s burst 1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// The 429, and the few calls sent before the pause reached Redis: far
	// below the 98 that 2 s at 49 a second would hold without it.
	var paused int
	if _, err := fmt.Sscanf(out.String()[strings.Index(out.String(), "after a 429"):], "after a 429 with Retry-After: 2, the upstream saw %d calls", &paused); err != nil || paused < 1 || paused > 20 {
		t.Errorf("during the pause the upstream saw %d calls (%v), want 1 to 20", paused, err)
	}
	var arrived, refused int
	if _, err := fmt.Sscanf(out.String()[strings.Index(out.String(), "window 1:"):], "window 1: %d calls arrived, %d refused", &arrived, &refused); err != nil || arrived > 50 || refused != 0 {
		t.Errorf("window 1: %d arrived, %d refused (%v); want at most 50 and none", arrived, refused, err)
	}
}
