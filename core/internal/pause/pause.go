// Package pause tells whether this process was paused: descheduled by a
// busy machine, throttled by its cgroup's CPU quota, stopped by a signal
// or by the garbage collector. A call to Redis that outlives its budget
// while the client itself was not running says nothing about Redis, so
// the store charges such a timeout to nobody.
//
// The detector is a ticker, as JVM and actor runtimes use: a goroutine
// that wakes every [Tick] and notes how late it woke. A wake-up later than
// [Late] past its due time is a pause, kept in a small ring with its
// interval. A question about a call asks whether a pause overlapped the
// call, or whether the ticker itself is overdue at the moment of the
// question (the caller ran before the ticker after the same pause).
//
// One detector serves the whole process, since a pause stops every
// goroutine of it. It runs only while it is used: [Watch] starts it (each
// store call calls Watch, which costs two atomic loads when the detector
// is running), and it stops by itself within 2×[Idle] without a Watch, so an
// idle process and a finished test leave no goroutine behind.
package pause

import (
	"sync"
	"sync/atomic"
	"time"
)

const (
	// Tick is how often the detector wakes. Each wake-up of an otherwise
	// idle process costs CPU (measured: a ticker alone used 25 ms of CPU a
	// second at 5 ms, 10 ms at 20 ms), which a fleet of small processes
	// pays in every one; a pause shorter than Tick+Late goes unseen, and
	// such a pause barely dents a 50 ms budget.
	Tick = 20 * time.Millisecond
	// Late is how late past its due time a wake-up must be to count as a
	// pause. A busy but running process wakes within a few milliseconds.
	Late = 20 * time.Millisecond
	// Idle is how often the running detector looks for a Watch since its
	// last look: it stops between Idle and twice Idle after the last.
	Idle = time.Second
	// keep is how many recent pauses are remembered.
	keep = 32
)

// base is the origin of the detector's monotonic clock.
var base = time.Now()

// Now returns the detector's clock: nanoseconds on the monotonic clock.
func Now() int64 { return int64(time.Since(base)) }

// At returns t on the detector's clock; t must carry a monotonic reading
// (as time.Now's results do).
func At(t time.Time) int64 { return int64(t.Sub(base)) }

// detector is the process's pause detector.
type detector struct {
	running  atomic.Bool
	watched  atomic.Bool  // a Watch since the ticker last looked
	lastTick atomic.Int64 // clock of the ticker's last wake-up; 0 when stopped

	mu     sync.Mutex
	pauses [keep][2]int64 // [start, end] of recent pauses, a ring
	next   int
	count  int
}

var std detector

// Watch makes sure the detector runs, and keeps it running for at least
// Idle more. It is cheap enough for every store call: inlined, a Watch
// since the detector last looked costs one load (the rest is watch's, out
// of line: its code cost every call code lines from cold; clientcost
// -cold). While watched is set the detector runs: run clears it only to
// look for a Watch, and looks again after it stops.
func Watch() {
	if !std.watched.Load() {
		watch()
	}
}

// watch is Watch when the detector was not watched since it last
// looked, or is not running.
func watch() {
	if std.running.Load() {
		// Storing only when the ticker has cleared it keeps the cache
		// line quiet.
		std.watched.Store(true)
		return
	}
	std.watched.Store(true)
	if std.running.CompareAndSwap(false, true) {
		std.lastTick.Store(Now())
		go std.run()
	}
}

// run wakes every Tick, and stops after a whole Idle without a Watch.
func (d *detector) run() {
	t := time.NewTicker(Tick)
	defer t.Stop()
	look := Now() + int64(Idle)
	for range t.C {
		now := Now()
		last := d.lastTick.Swap(now)
		if gap := now - last; gap > int64(Tick+Late) {
			d.record(last, now)
		}
		if now < look {
			continue
		}
		look = now + int64(Idle)
		if d.watched.Swap(false) {
			continue
		}
		d.running.Store(false)
		// A Watch between the Swap and the Store above saw running
		// still true and returned: run on.
		if d.watched.Load() && d.running.CompareAndSwap(false, true) {
			continue
		}
		return
	}
}

// record notes a pause from start to end.
func (d *detector) record(start, end int64) {
	d.mu.Lock()
	d.pauses[d.next] = [2]int64{start, end}
	d.next = (d.next + 1) % keep
	d.count = min(d.count+1, keep)
	d.mu.Unlock()
}

// Overlaps reports whether the process was paused at some moment between
// start and end (the detector's clock, see [Now]), as far as the detector
// could see: a recorded pause overlaps that interval, or the ticker is
// overdue now (the process has just come back from a pause the ticker has
// not run since). Before the detector first runs it knows of no pause.
func Overlaps(start, end int64) bool {
	if std.running.Load() {
		if last := std.lastTick.Load(); last != 0 && Now()-last > int64(Tick+Late) {
			return true
		}
	}
	std.mu.Lock()
	defer std.mu.Unlock()
	for i := range std.count {
		p := std.pauses[i]
		if p[0] < end && p[1] > start {
			return true
		}
	}
	return false
}
