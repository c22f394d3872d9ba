package core

import (
	"fmt"
	"testing"
	"time"
)

// TestOwedStore holds the fallback's debt to Redis to its own admissions:
// counted under the share (10/s with a burst of 4 here: a third of 30/s,
// burst 10), decaying as the share refills, capped at the share's burst,
// taken once, and never holding what Redis admitted (the fallback's warm
// buckets, local.charge, are apart).
func TestOwedStore(t *testing.T) {
	p, err := newPlan([]Limit{{Rate: 30, Period: time.Second, Burst: 10}}, shareOf(3))
	if err != nil {
		t.Fatal(err)
	}
	ticks := p.local.ticks
	const t0 = int64(1_000_000_000)
	type step struct {
		name  string
		admit int64 // events the fallback admits at at
		at    int64 // microseconds after t0
		take  bool  // then take the debt at at
		want  int64 // what take returns
	}
	steps := []step{
		{name: "nothing owed", take: true, want: 0},
		{name: "two admitted", admit: 2, take: true, want: 2},
		{name: "taken once", take: true, want: 0},
		{name: "capped at the share's burst", admit: 9, take: true, want: 4},
		{name: "three admitted", admit: 3, at: 1_000_000},
		{name: "decays with the share: 150ms is 1.5 events, rounded up", at: 1_150_000, take: true, want: 2},
		{name: "admitted, then refilled", admit: 1, at: 2_000_000},
		{name: "nothing owed once refilled", at: 2_100_001, take: true, want: 0},
	}
	o := newOwedStore(1024)
	for _, s := range steps {
		now := t0 + s.at
		if s.admit > 0 {
			o.admitted(p, "k", now, ticks, s.admit)
		}
		if s.take {
			if got, _ := o.take(p, "k", now); got != s.want {
				t.Errorf("%s: take() = %d, want %d", s.name, got, s.want)
			}
		}
	}
	if o.holdsAny() {
		t.Errorf("holdsAny() = true after every debt was taken")
	}
	// A debt nobody takes goes once it is refilled: a miss in its shard
	// sweeps it (each key is looked for in its own shard: try many).
	o.admitted(p, "gone", t0, ticks, 1)
	for i := 0; o.holdsAny() && i < 10_000; i++ {
		o.take(p, fmt.Sprint("miss-", i), t0+time.Second.Microseconds())
	}
	if o.holdsAny() {
		t.Errorf("holdsAny() = true: a debt refilled long ago was never swept")
	}
	long := string(make([]byte, maxOwedKey+1))
	o.admitted(p, long, t0, ticks, 1)
	if o.holdsAny() {
		t.Errorf("a key of %d bytes was remembered; the longest is %d", len(long), maxOwedKey)
	}
}
