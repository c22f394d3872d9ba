package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestRun prints the table, and holds its story: first come, the hog
// takes nearly all the upstream; with fair share each small tenant gets
// at least 95% of what it offered, and the upstream admits as much.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out.Bytes(), []byte("fair share")) {
		t.Errorf("output lacks its table:\n%s", out.String())
	}
	const d = 2 * time.Second
	plain, err := simulate(false, d)
	if err != nil {
		t.Fatal(err)
	}
	fair, err := simulate(true, d)
	if err != nil {
		t.Fatal(err)
	}
	var sumPlain, sumFair int
	for name, tn := range tenants {
		sumPlain, sumFair = sumPlain+plain[name], sumFair+fair[name]
		if name == "hog" {
			continue
		}
		offered := int(d / tn.gap)
		if fair[name]*100 < offered*95 {
			t.Errorf("fair share: %s got %d of %d", name, fair[name], offered)
		}
		if plain[name]*10 > offered {
			t.Errorf("first come: %s got %d of %d; the hog should have taken nearly all", name, plain[name], offered)
		}
	}
	if allows := 100 + 2000; sumFair*100 < allows*97 || sumPlain*100 < allows*97 {
		t.Errorf("admitted %d first come and %d fair, want at least 97%% of %d each", sumPlain, sumFair, allows)
	}

}
