package core

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
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
// core/bucket.lua), and the script picks the window holding Redis's
// clock. The two clocks must agree within one period (a day for a daily
// quota); a call whose windows do not hold Redis's clock fails as a store
// error, and the fallback decides it.

// calendar is a calendar refill's periods in a zone.
type calendar struct {
	Unit Refill
	Loc  *time.Location
	Last atomic.Pointer[calWindows] // the windows computed last, reused while they hold the clock
}

// calWindows are the starts of five consecutive windows, in microseconds:
// window first+j is [start[j], start[j+1]). Made by windows(now), they
// hold now in window first+1 (start[1] <= now < start[2]).
type calWindows struct {
	First int64
	Start [5]int64
	Args  []any // "-1", k, b, first and the starts: the limit's script arguments
}

// Windows returns the Windows around now.
func (c *calendar) Windows(now int64, k, b int64) *calWindows {
	if w := c.Last.Load(); w != nil && w.Start[1] <= now && now < w.Start[2] {
		return w
	}
	i := c.guess(now)
	for now < c.Start(i) {
		i--
	}
	for now >= c.Start(i+1) {
		i++
	}
	w := &calWindows{First: i - 1}
	for j := range w.Start {
		w.Start[j] = c.Start(i - 1 + int64(j))
	}
	w.Args = make([]any, 0, 9)
	w.Args = append(w.Args, "-1", strconv.FormatInt(k, 10), strconv.FormatInt(b, 10), strconv.FormatInt(w.First, 10))
	for _, s := range w.Start {
		w.Args = append(w.Args, strconv.FormatInt(s, 10))
	}
	c.Last.Store(w)
	return w
}

// guess is the index of the window holding the local date of the instant
// us (microseconds); windows corrects it where a zone's local dates are
// not monotonic.
func (c *calendar) guess(us int64) int64 {
	y, m, d := time.UnixMicro(us).In(c.Loc).Date()
	switch c.Unit {
	case RefillWeekly:
		return floorDiv(dayNumber(y, m, d)+3, 7) // 1970-01-01 was a Thursday
	case RefillMonthly:
		return int64(y)*12 + int64(m) - 1
	}
	return dayNumber(y, m, d)
}

// Start is the first instant, in microseconds, of window i.
func (c *calendar) Start(i int64) int64 {
	switch c.Unit {
	case RefillWeekly:
		y, m, d := civilDate(i*7 - 3)
		return dayStart(y, m, d, c.Loc)
	case RefillMonthly:
		return dayStart(int(floorDiv(i, 12)), time.Month(i-floorDiv(i, 12)*12+1), 1, c.Loc)
	}
	y, m, d := civilDate(i)
	return dayStart(y, m, d, c.Loc)
}

// dayNumber is the civil day number of a date: days since 1970-01-01.
func dayNumber(y int, m time.Month, d int) int64 {
	return floorDiv(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix(), 86400)
}

// civilDate is the date of a civil day number.
func civilDate(day int64) (int, time.Month, int) {
	return time.Unix(day*86400, 0).UTC().Date()
}

// dayStart is the first instant, in microseconds, whose local date in loc
// is y-m-d or later: local midnight, or the end of a DST gap that skips
// it.
func dayStart(y int, m time.Month, d int, loc *time.Location) int64 {
	target := dayNumber(y, m, d)
	on := func(t time.Time) bool {
		ty, tm, td := t.In(loc).Date()
		return dayNumber(ty, tm, td) >= target
	}
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if on(t) && !on(t.Add(-time.Second)) {
		return t.UnixMicro()
	}
	// Midnight falls in a DST change: search the change, which zones make
	// at a whole second, within a day of the naive midnight.
	lo, hi := t.Add(-24*time.Hour).Unix(), t.Add(24*time.Hour).Unix() // on(lo) is false, on(hi) true
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if on(time.Unix(mid, 0)) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi * 1_000_000
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

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

// stepWindow is where a stepped limit stands at one instant: the index of
// the window holding it and, for a calendar, the starts around it.
type stepWindow struct {
	Idx int64
	CW  *calWindows
}

// Window returns where stepped limit t stands at now.
func (t tickLimit) Window(now int64) stepWindow {
	if t.St.Cal == nil {
		return stepWindow{Idx: floorDiv(now, t.St.Every)}
	}
	cw := t.St.Cal.Windows(now, t.St.K, t.B)
	return stepWindow{Idx: cw.First + 1, CW: cw}
}

// StartOf is the start of the window n after w's, in microseconds.
func (t tickLimit) StartOf(w stepWindow, n int64) int64 {
	if t.St.Cal == nil {
		return (w.Idx + n) * t.St.Every
	}
	if n >= -1 && n <= 3 {
		return w.CW.Start[1+n]
	}
	return t.St.Cal.Start(w.Idx + n)
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
