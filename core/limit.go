package core

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Limit is a token bucket: Rate events per Period, with room for Burst
// events at once. The bucket starts full and refills continuously at
// Rate/Period, never beyond Burst.
//
// Limit is plain, comparable data that can be read from a configuration file.
// Its zero value is not a valid limit: Rate, Period and Burst must all be
// positive (see [Limit.Validate]).
//
// Two decisions share a bucket when they name the same key and the same
// limits, Name included. Give otherwise equal limits different Names to keep
// their buckets apart.
type Limit struct {
	// Name labels the limit in RateLimit-Policy headers and metrics and is
	// part of the bucket's identity. Optional.
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
	// Rate is the number of events admitted per Period. At least 1.
	Rate int `json:"rate" yaml:"rate"`
	// Period is the window Rate refers to: a whole number of microseconds,
	// at least one.
	Period time.Duration `json:"period" yaml:"period"`
	// Burst is the bucket's capacity: how many events may arrive at once
	// after a quiet spell. At least 1.
	Burst int `json:"burst" yaml:"burst"`
}

// PerSecond returns a limit of n events per second with a burst of n.
func PerSecond(n int) Limit { return Limit{Rate: n, Period: time.Second, Burst: n} }

// PerMinute returns a limit of n events per minute with a burst of n.
func PerMinute(n int) Limit { return Limit{Rate: n, Period: time.Minute, Burst: n} }

// PerHour returns a limit of n events per hour with a burst of n.
func PerHour(n int) Limit { return Limit{Rate: n, Period: time.Hour, Burst: n} }

// WithBurst returns a copy of l with its Burst set to b.
func (l Limit) WithBurst(b int) Limit { l.Burst = b; return l }

// WithName returns a copy of l with its Name set to name.
func (l Limit) WithName(name string) Limit { l.Name = name; return l }

// String formats l as "Rate/Period burst Burst", prefixed by its name when it
// has one, for logs and error messages.
func (l Limit) String() string {
	s := strconv.Itoa(l.Rate) + "/" + l.Period.String() + " burst " + strconv.Itoa(l.Burst)
	if l.Name != "" {
		s = strconv.Quote(l.Name) + " " + s
	}
	return s
}

// maxExact bounds the tick arithmetic so that every intermediate value of the
// Lua script, where numbers are doubles, stays an exact integer (below 2^53)
// with room for cost, reservations and the current time.
const maxExact = 1 << 50

// Validate reports whether l can be enforced exactly. The error wraps
// [ErrInvalidLimit] and names the field at fault.
func (l Limit) Validate() error {
	_, err := compileLimit(l)
	return err
}

// tickLimit is a validated limit in the integer units the bucket uses: one
// microsecond is r ticks and one event costs p ticks, with r/p reduced to
// lowest terms so the bucket's capacity in ticks (b*p) stays small.
type tickLimit struct {
	r, p, b int64
}

func compileLimit(l Limit) (tickLimit, error) {
	switch {
	case l.Rate <= 0:
		return tickLimit{}, fmt.Errorf("%w: Rate must be at least 1, got %d (%s)", ErrInvalidLimit, l.Rate, l)
	case l.Burst <= 0:
		return tickLimit{}, fmt.Errorf("%w: Burst must be at least 1, got %d (%s)", ErrInvalidLimit, l.Burst, l)
	case l.Period < time.Microsecond:
		return tickLimit{}, fmt.Errorf("%w: Period must be at least 1µs, got %s (%s)", ErrInvalidLimit, l.Period, l)
	case l.Period%time.Microsecond != 0:
		return tickLimit{}, fmt.Errorf("%w: Period must be a whole number of microseconds, got %s (%s)", ErrInvalidLimit, l.Period, l)
	case int64(l.Rate) > maxExact:
		return tickLimit{}, fmt.Errorf("%w: Rate %d is too large to count exactly (%s)", ErrInvalidLimit, l.Rate, l)
	}
	p := int64(l.Period / time.Microsecond)
	r := int64(l.Rate)
	g := gcd(r, p)
	r, p = r/g, p/g
	b := int64(l.Burst)
	if p > maxExact/b {
		return tickLimit{}, fmt.Errorf("%w: Burst %d with %d per %s cannot be counted exactly; lower Burst or Period, or raise Rate (%s)",
			ErrInvalidLimit, l.Burst, l.Rate, l.Period, l)
	}
	return tickLimit{r: r, p: p, b: b}, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// capacity is the bucket's tolerance in ticks.
func (t tickLimit) capacity() int64 { return t.b * t.p }

// maxWaitTicks is the longest reservation, in microseconds, whose tick count
// stays exact for this limit.
func (t tickLimit) maxWaitMicros() int64 {
	return (maxExact - t.capacity()) / t.r
}

// micros converts a positive duration to whole microseconds, rounding up.
func micros(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d > time.Duration(math.MaxInt64-999) {
		return math.MaxInt64 / 1000
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}
