package model

// MaxExact bounds the tick arithmetic so that every intermediate value of the
// Lua script, where numbers are doubles, stays an exact integer (below 2^53)
// with room for cost, reservations and the current time.
const MaxExact = 1 << 50

// Tick is a validated limit in the integer units the bucket uses: one
// microsecond is r ticks and one event costs p ticks, with r/p reduced to
// lowest terms so the bucket's capacity in ticks (b*p) stays small.
//
// A stepped limit (k > 0) counts in events (r = p = 1): k events return at
// the start of every window, never beyond b. Its windows are every
// microseconds long and aligned to the epoch, or, with Cal set, calendar
// periods (see calendar.go).
type Tick struct {
	R, P, B int64
	St      *Stepper // nil: continuous (GCRA)
}

// Stepper is a stepped limit's refill.
type Stepper struct {
	K     int64     // events added per window
	Every int64     // an interval's window in microseconds
	Cal   *Calendar // a calendar refill's windows; nil for an interval
}

// Stepped reports whether t refills in steps.
func (t Tick) Stepped() bool { return t.St != nil }

// Calendar returns t's Calendar, nil if it has none.
func (t Tick) Calendar() *Calendar {
	if t.St == nil {
		return nil
	}
	return t.St.Cal
}

// Capacity is the bucket's tolerance in ticks.
func (t Tick) Capacity() int64 { return t.B * t.P }

// Left is how many unit requests t could still take with a debt of d
// ticks (events for a stepped limit): 0 when d is at or beyond its
// capacity.
func (t Tick) Left(d int64) int64 { return max(0, (t.Capacity()-d)/t.P) }

// Micros is how long x ticks of t, a continuous limit, take to pass, in
// whole microseconds rounded up: 0 when x <= 0.
func (t Tick) Micros(x int64) int64 {
	if x <= 0 {
		return 0
	}
	return (x + t.R - 1) / t.R
}

// UnitWait is how long, in microseconds, a unit request waits under t, a
// continuous limit, with a debt of d ticks: 0 when it would pass now.
func (t Tick) UnitWait(d int64) int64 { return t.Micros(d + t.P - t.Capacity()) }

// MaxWaitMicros is the longest reservation, in microseconds, whose tick count
// stays exact for this limit.
func (t Tick) MaxWaitMicros() int64 {
	return (MaxExact - t.Capacity()) / t.R
}

// StepWindow is where a stepped limit stands at one instant: the index of
// the window holding it and, for a calendar, the starts around it.
type StepWindow struct {
	Idx int64
	CW  *CalWindows
}

// Window returns where stepped limit t stands at now.
func (t Tick) Window(now int64) StepWindow {
	if t.St.Cal == nil {
		return StepWindow{Idx: FloorDiv(now, t.St.Every)}
	}
	cw := t.St.Cal.Windows(now, t.St.K, t.B)
	return StepWindow{Idx: cw.First + 1, CW: cw}
}

// StartOf is the start of the window n after w's, in microseconds.
func (t Tick) StartOf(w StepWindow, n int64) int64 {
	if t.St.Cal == nil {
		return (w.Idx + n) * t.St.Every
	}
	if n >= -1 && n <= 3 {
		return w.CW.Start[1+n]
	}
	return t.St.Cal.Start(w.Idx + n)
}
