package core

import "testing"

// TestCanaryHashNoAlloc: once warm, hashing a key for a canary allocates
// nothing (its HMACs and buffers are pooled). The race detector drops
// pooled values on purpose, so under -race the count is only reported.
func TestCanaryHashNoAlloc(t *testing.T) {
	c := &canary{below: 1 << 62, hash: newCanaryHash(nil)}
	c.enforces("tenant:acme")
	allocs := testing.AllocsPerRun(1000, func() { c.enforces("tenant:acme") })
	if allocs != 0 && !raceEnabled {
		t.Fatalf("canary.enforces of a short key: %v allocs, want 0", allocs)
	}
	t.Logf("%v allocs per hash", allocs)
}
