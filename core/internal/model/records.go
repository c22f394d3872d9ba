package model

import "time"

// NoAnswer is a store's error for a call it did not answer: the caller
// gave up on it while it was in flight (gone), or the store could not
// answer (the engine decides under the failure policy, or returns
// ErrUnavailable).
type NoAnswer struct {
	Node  string // the node's name
	Cause error  // the store's failure; nil: its breaker kept the call from it
	Gone  error  // the caller's own context error
}

// Error says why the call was not answered.
func (e *NoAnswer) Error() string {
	switch {
	case e.Gone != nil:
		return e.Gone.Error()
	case e.Cause == nil:
		return "the circuit breaker of node " + e.Node + " is open"
	}
	return e.Cause.Error()
}

// Unwrap returns the caller's context error, else the store's failure.
func (e *NoAnswer) Unwrap() error {
	if e.Gone != nil {
		return e.Gone
	}
	return e.Cause
}

// SlotAsk is a concurrency slot asked of a store: one of key's, under a
// cap of max slots named fp in Redis and capID in local memory, each held
// for lease unless renewed.
type SlotAsk struct {
	FP    string
	CapID uint64
	Key   string
	Max   int
	Lease time.Duration
}

// Slot is a store's answer to a SlotAsk: whether the slot was taken, how
// many of the key's are held after it, and, in Redis, the slot's names.
type Slot struct {
	Acquired bool
	InFlight int
	RKey, ID string // the key's lease set and the slot's member; "" in memory
}

// SlotRef names a slot a store gave, to give it back: in memory by its
// cap and key, in Redis by its lease set and member.
type SlotRef struct {
	CapID    uint64
	Key      string
	RKey, ID string
	Lease    time.Duration
}

// LostSlot is a slot Redis may hold though nobody heard it was given
// (see the store's Acquire): the lease keeper gives it back.
type LostSlot struct{ RKey, ID string }

// SettleAsk is a reservation's settlement asked of a store: the buckets
// that decided it (a key's one, or a path's levels, root first, whose
// stored names take the root's hash tag), the id that names its markers
// in Redis, the difference to apply (final less reserved, in events),
// how long Redis keeps the markers, and the limiter's clock, now and when
// the reservation was made (At: a stepped limit is settled in its window).
type SettleAsk struct {
	Plans  []*Plan
	Keys   []string
	Path   bool
	ID     string
	Delta  int64
	Marker time.Duration
	Now    int64
	At     int64
}

// PathAsk is a path's decision as the engine asks it of a store.
type PathAsk struct {
	Names   []string // each level's name, for the log
	Plans   []*Plan  // each level's, root first
	Keys    []string // each level's key
	IDs     []uint64 // each level's plan ID, for local maps
	Levels  [][]Tick // each level's limits: its plan's, or in a fallback its share
	Cost    int64
	Penalty int64     // microseconds
	Now     int64     // the limiter's clock, microseconds
	Share   *ShareAsk // the path's shared level; nil: none
}

// ShareAsk is a path's shared level (core's Share) as one decision asks
// it: the level whose key is the parent, whether its children (the keys
// of the level below) share it fairly, the asking child's weight, the
// window its consumption records count in, and in tokens of the level's
// one continuous limit, the contention level and the floor the request's
// class must leave. Arithmetic: core/path_share_model.go.
type ShareAsk struct {
	Level   int   // 0-based
	Fair    bool  // fair share among the children
	Weight  int64 // the child's, >= 1
	Window  int64 // microseconds, >= 1
	Contend int64 // tokens: a take that leaves fewer is under contention
	Floor   int64 // tokens: the request's class leaves as many
}

// Buckets names several buckets to a store at once: to read them, writing
// nothing (Rule.PeekMany, PathRule.Peek), or to delete them
// (PathRule.Reset). Each bucket is a plan and a key; a path's levels also
// name their Root, whose hash tag their stored names take (see the store's
// DecidePath), so that they live in one Cluster slot.
type Buckets struct {
	Plans []*Plan  // each bucket's plan, in order
	Keys  []string // each bucket's key (a path level's: the path up to it)
	Root  string   // a path's root key; "": each bucket's stored name takes its own key's tag
	Now   int64    // the limiter's clock, microseconds: a calendar limit's windows are those around it
}

// Renewal is one call of the lease keeper's round (see the store's Renew): a slot's
// renewal, or with give, the give back of a slot nobody heard was given.
// The store sets its outcome: the reply, or the error, and whether it was
// sent at all.
type Renewal struct {
	RKey, ID string
	Max      int           // the cap's Max
	Lease    time.Duration // the cap's lease
	Give     bool          // give the slot back (release.lua), not renew it
	Vals     []int64       // the reply: renew.lua's or release.lua's
	Err      error
	KeyFault bool // Err is the key's own fault: Redis answered, about this key alone
	Sent     bool
}

// LeaseCall is a token lease asked of the store (see core/hotlease.go): a take
// (with the request of Cost that asked, 0 for none), or with Back a give
// back of carry tokens.
type LeaseCall struct {
	Plan    *Plan
	Key     string
	ID      string // the lease's id in the key's holds
	Back    bool
	Cost    int64
	Want    int64
	Carry   int64 // tokens in hand carried into the take; negative: given back first
	Penalty int64 // microseconds
	Now     int64 // the limiter's clock, microseconds
	Life    int64 // the plan's lease life, microseconds
	Bound   int64 // the plan's lease bound, events
}

// LeaseAnswer is a token lease call's answer: the request's decision, the
// tokens granted, the lease's life and the tokens given back; At is the
// microsecond on Redis's clock the call ran, when the lease's life began.
type LeaseAnswer struct {
	Decision               Decision
	Granted, Life, Refunds int64
	At                     int64
}
