package sluicepage

import (
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
)

// maxWarnings is how many events a [Warnings] keeps: as many as the page
// shows.
const maxWarnings = maxRows

// Warnings records the threshold events a limiter raises (see
// [core.Rule.WithWarning]) for the page to show (see [ShowWarnings]): the
// 100 most recent whose window has not ended. Give the limiter its Record
// as the handler:
//
//	warnings := new(sluicepage.Warnings)
//	lim, err := core.New(rdb, core.WithThresholdHandler(warnings.Record))
//
// A limiter raises each event once across the fleet, on the replica whose
// decision crossed the threshold, so a Warnings holds the events of its
// own replica only: with several replicas, each page shows a share of
// them. For the fleet's, read the metric sluice_threshold_events_total
// (packages sluiceprom and sluiceotel), which every replica adds to.
//
// Its zero value is ready to use; it is safe for concurrent use, starts no
// goroutine and holds nothing to close.
type Warnings struct {
	now func() time.Time // nil: time.Now; tests set it

	mu     sync.Mutex
	events []Warning // oldest first, at most maxWarnings
}

// Record records ev, raised now: its window starts now and ends
// ev.Window later. The event's limit is named by its Name, or by its text
// form (such as "600/m") if it has none. It forgets the oldest event when it holds 100, and
// those whose window has ended. Record is fast (no I/O, no allocation
// once full), as a handler of [core.WithThresholdHandler] must be.
func (w *Warnings) Record(ev core.ThresholdEvent) {
	name := ev.Limit.Name
	if name == "" {
		name = ev.Limit.String()
		if t, err := ev.Limit.MarshalText(); err == nil {
			name = string(t)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock()
	w.expire(now)
	if len(w.events) == maxWarnings {
		w.events = slices.Delete(w.events, 0, 1)
	}
	w.events = append(w.events, Warning{
		Limit:     name,
		Key:       ev.Key,
		Threshold: ev.Threshold,
		Remaining: ev.Remaining,
		At:        now,
		Until:     now.Add(ev.Window),
	})
}

// Recent returns the events recorded whose window has not ended, latest
// first.
func (w *Warnings) Recent() []Warning {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expire(w.clock())
	out := slices.Clone(w.events)
	slices.Reverse(out)
	return out
}

// expire forgets the events whose window ended at or before now. It is
// called with w.mu held.
func (w *Warnings) expire(now time.Time) {
	w.events = slices.DeleteFunc(w.events, func(e Warning) bool { return !now.Before(e.Until) })
}

// clock returns the time now.
func (w *Warnings) clock() time.Time {
	if w.now != nil {
		return w.now()
	}
	return time.Now()
}
