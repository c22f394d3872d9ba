package outbound

import (
	"sync/atomic"
	"time"
)

// EventKind says what happened to a call.
type EventKind int8

const (
	// Waited is a call that waited for the budget before it was sent.
	Waited EventKind = iota + 1
	// Refused is a call the budget refused: it failed with an error
	// wrapping ErrLimited and was not sent.
	Refused
	// Paused is a pause an upstream asked for and the budget applied for
	// every replica (Retry-After, or a quota that comes back later).
	Paused
)

// String returns "waited", "refused" or "paused".
func (k EventKind) String() string {
	switch k {
	case Waited:
		return "waited"
	case Refused:
		return "refused"
	case Paused:
		return "paused"
	}
	return "unknown"
}

// Event is what an [Observer] is told.
type Event struct {
	// Name is the budget's (see WithName): a bounded label value.
	Name string
	// Kind says what happened.
	Kind EventKind
	// Wait is how long the call waited (Waited), would have had to wait
	// (Refused), or the pause's length (Paused).
	Wait time.Duration
	// ByUpstream is set when the upstream's pause made the call wait or
	// be refused, rather than the budget's rate.
	ByUpstream bool
}

// Observer is told of each call that waited or was refused and of each
// pause. It is called synchronously on the call's goroutine, so it must
// be fast and safe for concurrent use. A Prometheus or OpenTelemetry
// counter per (Name, Kind) is the usual implementation.
type Observer interface {
	ObserveOutbound(Event)
}

// Stats counts what a [Budget] did since it was made.
type Stats struct {
	// Sent is the calls the budget let through (retries included).
	Sent int64
	// Waited is the calls that waited before they were sent.
	Waited int64
	// Refused is the calls refused with an error wrapping ErrLimited.
	Refused int64
	// Paused is the pauses upstreams asked for that the budget applied.
	Paused int64
	// Lowered is the times a policy an upstream announced lowered a key's
	// limit.
	Lowered int64
}

type counters struct {
	sent, waited, refused, paused, lowered atomic.Int64
}

// Stats returns the budget's counts. It is safe for concurrent use.
func (b *Budget) Stats() Stats {
	c := &b.counts
	return Stats{Sent: c.sent.Load(), Waited: c.waited.Load(), Refused: c.refused.Load(), Paused: c.paused.Load(), Lowered: c.lowered.Load()}
}

func (b *Budget) observe(kind EventKind, wait time.Duration, byUpstream bool) {
	switch kind {
	case Waited:
		b.counts.waited.Add(1)
	case Refused:
		b.counts.refused.Add(1)
	case Paused:
		b.counts.paused.Add(1)
	}
	if b.o.obs != nil {
		b.o.obs.ObserveOutbound(Event{Name: b.o.name, Kind: kind, Wait: wait, ByUpstream: byUpstream})
	}
}
