package core

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core/internal/model"
)

// Limit is a token bucket: Rate events per Period, with room for Burst
// events at once. The bucket starts full and, by default, refills
// continuously at Rate/Period, never beyond Burst. [Limit.Refill] selects
// a stepped refill instead: Rate tokens at once at the end of every
// Period ([RefillInterval]), or the whole quota at every calendar boundary
// in a time zone ([RefillDaily], [RefillWeekly], [RefillMonthly]). Limits
// of every kind may be decided together on one key.
//
// Limit is plain, comparable data that can be read from a configuration file.
// Its zero value is not a valid limit: Rate, Period and Burst must all be
// positive (see [Limit.Validate]), but for a calendar refill, whose Period
// is zero and whose Burst equals Rate.
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
	// at least one. Zero for a calendar refill, whose calendar sets it.
	Period time.Duration `json:"period" yaml:"period"`
	// Burst is the bucket's capacity: how many events may arrive at once
	// after a quiet spell. At least 1.
	Burst int `json:"burst" yaml:"burst"`
	// Refill is how the bucket refills; the zero value, [RefillContinuous],
	// is the continuous refill above. See [Refill] for the others.
	Refill Refill `json:"refill,omitempty" yaml:"refill,omitempty"`
	// Zone is the time zone of a calendar refill, an IANA name such as
	// "America/New_York" (see time.LoadLocation); "" is UTC. It must be
	// empty for other refills. The zone database is read from the system;
	// a program in an image without one (distroless, scratch) imports
	// time/tzdata (see [PerCalendarDay]).
	Zone string `json:"zone,omitempty" yaml:"zone,omitempty"`
}

// Refill is how a limit's bucket refills. Its zero value is
// [RefillContinuous].
//
// A stepped refill (every other value) keeps the engine's semantics: it
// may stand beside other limits in one atomic decision, a denial consumes
// nothing, and Result describes the deciding limit, with ResetAfter and
// RetryAfter at the window boundary (a calendar quota's local midnight,
// say). Its windows, counted exactly in whole events, are:
//
//   - interval: Period long, aligned to the Unix epoch, so "10 every
//     minute" refills on the minute, for every key at once;
//   - calendar: midnight to midnight local time in Zone (23, 24 or 25
//     hours across a DST change; a midnight that a change skips starts
//     the day at the change), weeks from Monday, months of their own
//     lengths. Go computes the boundaries (Redis has no zone database)
//     from the limiter's clock; Redis's clock picks among them, and the
//     two must agree within one period, or the decision fails as a store
//     error and the fallback decides.
//
// A reservation ([Limiter.Wait]) on a stepped limit waits at most until
// its next window starts. A penalty lock outlasts a boundary: the new
// window's tokens wait for the lock to end. The local fallback's share
// of a stepped limit for n replicas is ceil(Rate/n) per window with a
// Burst of ceil(Burst/n), at the same boundaries (a fleet's n replicas
// may then admit up to n*ceil(Rate/n) in a window). [Rule.Reserve]
// settles a stepped limit in the window the reservation was made in.
type Refill string

const (
	// RefillContinuous refills Rate tokens per Period continuously, to the
	// microsecond (a GCRA): the default.
	RefillContinuous Refill = ""
	// RefillInterval adds Rate tokens at once every Period, never beyond
	// Burst. The intervals are aligned to the Unix epoch: they start at
	// whole multiples of Period since 1970-01-01 00:00 UTC (every minute
	// on the minute), the same for every key and every replica.
	RefillInterval Refill = "interval"
	// RefillDaily restores the whole quota (Rate, which Burst must equal)
	// at every local midnight in Zone: a day is midnight to midnight local
	// time, 23, 24 or 25 hours long. Period must be zero.
	RefillDaily Refill = "daily"
	// RefillWeekly is RefillDaily for weeks starting on Monday at local
	// midnight.
	RefillWeekly Refill = "weekly"
	// RefillMonthly is RefillDaily for months, starting on the first of
	// each month at local midnight.
	RefillMonthly Refill = "monthly"
)

// calendar reports whether r is a calendar refill.
func (r Refill) calendar() bool {
	return r == RefillDaily || r == RefillWeekly || r == RefillMonthly
}

// PerSecond returns a limit of n events per second with a burst of n.
func PerSecond(n int) Limit { return Limit{Rate: n, Period: time.Second, Burst: n} }

// PerMinute returns a limit of n events per minute with a burst of n.
func PerMinute(n int) Limit { return Limit{Rate: n, Period: time.Minute, Burst: n} }

// PerHour returns a limit of n events per hour with a burst of n.
func PerHour(n int) Limit { return Limit{Rate: n, Period: time.Hour, Burst: n} }

// PerDay returns a limit of n events per 24 hours with a burst of n,
// refilled continuously: a rolling day, not a calendar one. For a quota
// restored whole at local midnight, use [PerCalendarDay].
func PerDay(n int) Limit { return Limit{Rate: n, Period: 24 * time.Hour, Burst: n} }

// PerInterval returns a limit that adds n tokens at once every d (aligned
// to the Unix epoch, see [RefillInterval]), with a burst of n.
func PerInterval(n int, d time.Duration) Limit {
	return Limit{Rate: n, Period: d, Burst: n, Refill: RefillInterval}
}

// PerCalendarDay returns a quota of n events per calendar day in zone (an
// IANA name, "" for UTC), restored whole at every local midnight (see
// [RefillDaily]).
//
// A zone other than UTC is loaded from the system's zone database, when
// the limit is validated or first used. An image without one (distroless
// static, scratch, some Alpine builds) makes every such limit invalid
// ("unknown time zone"); embed Go's copy of the database (about 450 kB)
// in the program with a blank import in package main:
//
//	import _ "time/tzdata"
//
// or build with -tags timetzdata. The same holds for [PerCalendarWeek],
// [PerCalendarMonth] and a Zone read from configuration.
func PerCalendarDay(n int, zone string) Limit {
	return Limit{Rate: n, Burst: n, Refill: RefillDaily, Zone: zone}
}

// PerCalendarWeek returns a quota of n events per calendar week (from
// Monday) in zone, restored whole at every week's start (see
// [RefillWeekly]).
func PerCalendarWeek(n int, zone string) Limit {
	return Limit{Rate: n, Burst: n, Refill: RefillWeekly, Zone: zone}
}

// PerCalendarMonth returns a quota of n events per calendar month in zone,
// restored whole at the start of every month (see [RefillMonthly]).
func PerCalendarMonth(n int, zone string) Limit {
	return Limit{Rate: n, Burst: n, Refill: RefillMonthly, Zone: zone}
}

// WithBurst returns a copy of l with its Burst set to b.
func (l Limit) WithBurst(b int) Limit { l.Burst = b; return l }

// WithName returns a copy of l with its Name set to name.
func (l Limit) WithName(name string) Limit { l.Name = name; return l }

// String formats l as "Rate/Period burst Burst", prefixed by its name when it
// has one, for logs and error messages. An interval refill adds "refill
// interval"; a calendar quota is "Rate/calendar-day zone Zone" (week,
// month), the zone left out for UTC.
func (l Limit) String() string {
	s := strconv.Itoa(l.Rate) + "/" + l.Period.String() + " burst " + strconv.Itoa(l.Burst)
	switch {
	case l.Refill.calendar() && l.Burst == l.Rate && l.Period == 0:
		s = strconv.Itoa(l.Rate) + "/" + calendarPeriod(l.Refill)
	case l.Refill != RefillContinuous:
		s += " refill " + string(l.Refill)
	}
	if l.Zone != "" {
		s += " zone " + l.Zone
	}
	if l.Name != "" {
		s = strconv.Quote(l.Name) + " " + s
	}
	return s
}

// Validate reports whether l can be enforced exactly. The error wraps
// [ErrInvalidLimit] and names the field at fault.
func (l Limit) Validate() error {
	_, err := compileLimit(l)
	return err
}

func compileLimit(l Limit) (tickLimit, error) {
	switch l.Refill {
	case RefillContinuous:
	case RefillInterval:
		return compileInterval(l)
	case RefillDaily, RefillWeekly, RefillMonthly:
		return compileCalendar(l)
	default:
		return tickLimit{}, fmt.Errorf("%w: Refill %q is not one of \"\" (continuous), %q, %q, %q or %q (%s)",
			ErrInvalidLimit, string(l.Refill), RefillInterval, RefillDaily, RefillWeekly, RefillMonthly, l)
	}
	if err := checkFields(l); err != nil {
		return tickLimit{}, err
	}
	if int64(l.Rate) > maxExact {
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
	return tickLimit{R: r, P: p, B: b}, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
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

// checkFields checks what continuous and interval limits ask alike of
// their fields: no Zone, a positive Rate and Burst, and a Period of whole
// microseconds.
func checkFields(l Limit) error {
	switch {
	case l.Zone != "" && l.Refill == RefillContinuous:
		return fmt.Errorf("%w: Zone %q needs a calendar Refill, not a continuous one (%s)", ErrInvalidLimit, l.Zone, l)
	case l.Zone != "":
		return fmt.Errorf("%w: Zone %q needs a calendar Refill, not %q (%s)", ErrInvalidLimit, l.Zone, string(l.Refill), l)
	case l.Rate <= 0:
		return fmt.Errorf("%w: Rate must be at least 1, got %d (%s)", ErrInvalidLimit, l.Rate, l)
	case l.Burst <= 0:
		return fmt.Errorf("%w: Burst must be at least 1, got %d (%s)", ErrInvalidLimit, l.Burst, l)
	case l.Period < time.Microsecond:
		return fmt.Errorf("%w: Period must be at least 1µs, got %s (%s)", ErrInvalidLimit, l.Period, l)
	case l.Period%time.Microsecond != 0:
		return fmt.Errorf("%w: Period must be a whole number of microseconds, got %s (%s)", ErrInvalidLimit, l.Period, l)
	}
	return nil
}

// compileInterval compiles a limit refilled every Period.
func compileInterval(l Limit) (tickLimit, error) {
	if err := checkFields(l); err != nil {
		return tickLimit{}, err
	}
	if int64(l.Rate) > maxExact/4 || int64(l.Burst) > maxExact/4 {
		return tickLimit{}, fmt.Errorf("%w: Rate %d or Burst %d is too large to count exactly (%s)", ErrInvalidLimit, l.Rate, l.Burst, l)
	}
	return tickLimit{R: 1, P: 1, B: int64(l.Burst), St: &stepper{K: int64(l.Rate), Every: int64(l.Period / time.Microsecond)}}, nil
}

// compileCalendar compiles a quota restored at calendar boundaries.
func compileCalendar(l Limit) (tickLimit, error) {
	switch {
	case l.Rate <= 0:
		return tickLimit{}, fmt.Errorf("%w: Rate must be at least 1, got %d (%s)", ErrInvalidLimit, l.Rate, l)
	case int64(l.Rate) > maxExact/4:
		return tickLimit{}, fmt.Errorf("%w: Rate %d is too large to count exactly (%s)", ErrInvalidLimit, l.Rate, l)
	case l.Burst != l.Rate:
		return tickLimit{}, fmt.Errorf("%w: Burst must equal Rate for a %s refill (the whole quota returns at each boundary), got %d and %d (%s)",
			ErrInvalidLimit, l.Refill, l.Burst, l.Rate, l)
	case l.Period != 0:
		return tickLimit{}, fmt.Errorf("%w: Period must be zero for a %s refill (the calendar sets it), got %s (%s)", ErrInvalidLimit, l.Refill, l.Period, l)
	}
	loc, err := loadZone(l.Zone)
	if err != nil {
		return tickLimit{}, fmt.Errorf("%w: Zone %q: %v (%s)", ErrInvalidLimit, l.Zone, err, l)
	}
	n := int64(l.Rate)
	return tickLimit{R: 1, P: 1, B: n, St: &stepper{K: n, Cal: &calendar{Unit: periods[l.Refill], Loc: loc}}}, nil
}

// periods maps a calendar refill to its period.
var periods = map[Refill]model.Period{RefillDaily: model.Daily, RefillWeekly: model.Weekly, RefillMonthly: model.Monthly}
