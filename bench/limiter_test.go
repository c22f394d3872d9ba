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
