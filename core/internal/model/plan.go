package model

// Plan is the part of a compiled plan (core's plan: a key's limits,
// prepared once) that a store reads: the limits in integer form, their
// identity, and their script arguments. The engine embeds it in its own
// plan and hands stores a pointer to it; nothing in it changes after the
// plan is compiled.
type Plan struct {
	Ticks   []Tick // the limits, in order
	FP      string // fingerprint, part of the Redis key
	ID      uint64 // fingerprint for local maps
	Args    []any  // the limits as script arguments (see the layout table at the top of bucket.lua)
	Stepped bool   // some limit refills in steps: the script's batch form
	Cal     bool   // some limit is a calendar's: Args lacks its arguments, which each call adds

	// Shadow are the plan's shadow limits (core's Rule.WithShadowLimits),
	// one plan of one limit each, with buckets of their own: every
	// decision under the plan decides each of them too, on the same key,
	// cost and wait, without a penalty, in the same call, and their
	// answers change nothing of its own. Nil: none.
	Shadow []*Plan
}
