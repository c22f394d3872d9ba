package model

import (
	"strconv"
	"sync/atomic"
	"time"
)

// Calendar is a calendar refill's periods in a zone.
type Calendar struct {
	Unit Period
	Loc  *time.Location
	Last atomic.Pointer[CalWindows] // the windows computed last, reused while they hold the clock
}

// CalWindows are the starts of five consecutive windows, in microseconds:
// window first+j is [start[j], start[j+1]). Made by Windows(now), they
// hold now in window first+1 (start[1] <= now < start[2]).
type CalWindows struct {
	First int64
	Start [5]int64
	Args  []any // "-1", k, b, first and the starts: the limit's script arguments
}

// Windows returns the Windows around now.
func (c *Calendar) Windows(now int64, k, b int64) *CalWindows {
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
	w := &CalWindows{First: i - 1}
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
func (c *Calendar) guess(us int64) int64 {
	y, m, d := time.UnixMicro(us).In(c.Loc).Date()
	switch c.Unit {
	case Weekly:
		return FloorDiv(dayNumber(y, m, d)+3, 7) // 1970-01-01 was a Thursday
	case Monthly:
		return int64(y)*12 + int64(m) - 1
	}
	return dayNumber(y, m, d)
}

// Start is the first instant, in microseconds, of window i.
func (c *Calendar) Start(i int64) int64 {
	switch c.Unit {
	case Weekly:
		y, m, d := civilDate(i*7 - 3)
		return dayStart(y, m, d, c.Loc)
	case Monthly:
		return dayStart(int(FloorDiv(i, 12)), time.Month(i-FloorDiv(i, 12)*12+1), 1, c.Loc)
	}
	y, m, d := civilDate(i)
	return dayStart(y, m, d, c.Loc)
}

// dayNumber is the civil day number of a date: days since 1970-01-01.
func dayNumber(y int, m time.Month, d int) int64 {
	return FloorDiv(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix(), 86400)
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

func FloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Period is a calendar refill's period.
type Period int8

// The periods of a calendar refill.
const (
	Daily   Period = iota // a civil day
	Weekly                // a week from Monday
	Monthly               // a month
)
