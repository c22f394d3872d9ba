package bench

import (
	"testing"
	"time"
)

func TestIdealAdmits(t *testing.T) {
	t0 := time.Unix(1000, 0)
	every := func(n int, d time.Duration) []time.Time {
		s := make([]time.Time, n)
		for i := range s {
			s[i] = t0.Add(time.Duration(i) * d)
		}
		return s
	}
	tests := []struct {
		name  string
		lim   Limit
		sends []time.Time
		want  int
	}{
		{"one per ms at 500/s burst 500 for 2 s", Limit{500, time.Second, 500}, every(2000, time.Millisecond), 500 + 999},
		{"burst 1, half a token per request", Limit{500, time.Second, 1}, every(2000, time.Millisecond), 1000},
		{"slower than the rate is never denied", Limit{10, time.Second, 1}, every(50, 101*time.Millisecond), 50},
		{"all at once", Limit{10, time.Minute, 10}, every(25, 0), 10},
		{"slow bucket", Limit{10, time.Minute, 10}, append(every(10, 0), every(31, time.Second)[1:]...), 15},
		{"none", Limit{1, time.Second, 1}, nil, 0},
	}
	for _, tt := range tests {
		if got := tt.lim.IdealAdmits(tt.sends); got != tt.want {
			t.Errorf("%s: IdealAdmits = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestUluleWindow(t *testing.T) {
	tests := []struct {
		lim  Limit
		want time.Duration
		ok   bool
	}{
		{Limit{1000, time.Second, 100}, 100 * time.Millisecond, true},
		{Limit{10, time.Minute, 10}, time.Minute, true},
		{Limit{1_000_000_000, time.Second, 1_000_000_000}, time.Second, true},
		{Limit{3, time.Second, 1}, 0, false},
		{Limit{1_000_000, time.Second, 1}, 0, false},
	}
	for _, tt := range tests {
		got, err := ululeWindow(tt.lim)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ululeWindow(%s) = %s, %v; want %s (ok %v)", tt.lim, got, err, tt.want, tt.ok)
		}
	}
}

func TestIdealAdmitsIn(t *testing.T) {
	hammered := func(slots, each int) []uint32 {
		c := make([]uint32, slots)
		for i := range c {
			c[i] = uint32(each)
		}
		return c
	}
	stalled := hammered(3000, 10)
	for i := 1000; i < 1500; i++ {
		stalled[i] = 0 // half a second when nobody asked
	}
	lim := Limit{1000, time.Second, 1000}
	tests := []struct {
		name   string
		counts []uint32
		atEnd  bool
		want   int
	}{
		// From a full bucket, 3 s of calls admit the burst and a token a
		// millisecond: placed at their slots' ends, the first slot's refill
		// is lost to the full bucket, so both placements admit the same.
		{"hammered 3 s, at the start", hammered(3000, 10), false, 1000 + 2999},
		{"hammered 3 s, at the end", hammered(3000, 10), true, 1000 + 2999},
		// A stall of half a second: the bucket refills 500 tokens (below
		// its burst) and the calls after it take them, so nothing is lost.
		{"a stall costs nothing below the burst", stalled, false, 1000 + 2999},
		{"slower than the rate", hammered(100, 0), false, 0},
		{"one call a slot never denied", hammered(2000, 1), false, 2000},
		{"a burst over the capacity", []uint32{5000}, false, 1000},
		{"one slot, at its end", []uint32{5000}, true, 1000},
	}
	for _, tt := range tests {
		if got := lim.IdealAdmitsIn(tt.counts, time.Millisecond, tt.atEnd); got != tt.want {
			t.Errorf("%s: IdealAdmitsIn = %d, want %d", tt.name, got, tt.want)
		}
	}
	// A longer stall, past a full bucket's refill, loses what did not fit.
	long := hammered(3000, 10)
	for i := 1000; i < 2500; i++ {
		long[i] = 0
	}
	if got, want := lim.IdealAdmitsIn(long, time.Millisecond, false), 1000+999+1000+499; got != want {
		t.Errorf("a 1.5 s stall: IdealAdmitsIn = %d, want %d", got, want)
	}
}
