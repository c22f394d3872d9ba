package redisstore

import "testing"

// TestBreakerHysteresis: the breaker closes after Successes good probes in
// a row, not on the first; a failed probe starts the count again.
func TestBreakerHysteresis(t *testing.T) {
	b := &breaker{threshold: 2, closeAfter: 3, cooldown: 100, stale: 10_000}
	now := int64(1_000)
	probe := func(ok bool) bool {
		t.Helper()
		now += 100
		r := b.route(now)
		if r != viaProbe {
			t.Fatalf("at %d: route = %v, want a probe", now, r)
		}
		if ok {
			return b.success(r, now)
		}
		b.failure(r, now, now)
		return false
	}
	b.failure(viaStore, now, now)
	if b.failure(viaStore, now, now) != true || !b.isOpen() {
		t.Fatal("two failures in a row did not open a breaker with threshold 2")
	}
	if r := b.route(now + 50); r != viaLocal {
		t.Fatalf("within the cooldown: route = %v, want local", r)
	}
	for i, step := range []struct {
		ok, closes bool
	}{{true, false}, {true, false}, {false, false}, {true, false}, {true, false}, {true, true}} {
		if got := probe(step.ok); got != step.closes {
			t.Fatalf("probe %d (ok %v): closed = %v, want %v", i, step.ok, got, step.closes)
		}
		if b.isOpen() == step.closes {
			t.Fatalf("probe %d: isOpen = %v after closed = %v", i, b.isOpen(), step.closes)
		}
	}
}
