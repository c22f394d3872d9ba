package core

import (
	"errors"
	"sync"
	"time"
)

// Calendar windows. A calendar refill's windows are its periods (days,
// weeks from Monday, months) in a time zone, numbered by an index that
// does not depend on the zone's offset: a day is its civil day number
// (days since 1970-01-01), a week the number of the Monday-based week
// holding it, a month year*12 + month - 1. Window i starts at start(i),
// the first instant whose local date is its first day; it ends where
// window i+1 starts, so a day across a DST change is 23 or 25 hours long.
//
// Redis has no time-zone database, so Go computes the boundaries: each
// call passes the starts of five consecutive windows around the
// limiter's clock (see calWindows and the layout table at the top of
// core/internal/redisstore/bucket.lua), and the script picks the window holding Redis's
// clock. The two clocks must agree within one period (a day for a daily
// quota); a call whose windows do not hold Redis's clock fails as a store
// error, and the fallback decides it.

// zones caches loaded locations by name: loading reads the zone database.
var zones sync.Map // string -> *time.Location

// loadZone loads a calendar refill's zone: an IANA name, "" for UTC.
// "Local" is refused, since replicas may disagree on it.
func loadZone(name string) (*time.Location, error) {
	if name == "Local" {
		return nil, errors.New(`"Local" differs between machines; name the zone`)
	}
	if v, ok := zones.Load(name); ok {
		return v.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	zones.Store(name, loc)
	return loc, nil
}

// Window returns the refill window of l that holds t, [start, end): for a
// calendar refill the day, week or month in l's zone (start and end in
// that zone), for an interval refill the interval (aligned to the Unix
// epoch, in UTC). A stepped limit's tokens return at end. For a
// continuous refill, or an invalid limit, both are the zero time. It is
// safe for concurrent use.
func (l Limit) Window(t time.Time) (start, end time.Time) {
	if l.Refill == RefillContinuous {
		return time.Time{}, time.Time{}
	}
	tl, err := compileLimit(l)
	if err != nil {
		return time.Time{}, time.Time{}
	}
	w := tl.Window(t.UnixMicro())
	start, end = time.UnixMicro(tl.StartOf(w, 0)), time.UnixMicro(tl.StartOf(w, 1))
	if c := tl.Calendar(); c != nil {
		return start.In(c.Loc), end.In(c.Loc)
	}
	return start.UTC(), end.UTC()
}
