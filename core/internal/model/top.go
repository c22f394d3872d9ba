package model

import "time"

// TopCounts is one kind of a top-talkers sketch's counts (admitted cost,
// or denials) as a store keeps them: the stream's total weight, the error
// bound of the counts (see core's spaceSaving: every count is within it of
// the truth), and one count per key hash, with the key's name when names
// are kept ("" otherwise).
type TopCounts struct {
	Total, Bound int64
	Hashes       []uint64
	Counts       []int64
	Names        []string // nil, or one per hash
}

// TopFlush is one limit's sketch, flushed by one replica into the window
// starting at Window (unix seconds), kept TTL after it is written.
type TopFlush struct {
	Limit         string
	Window        int64
	TTL           time.Duration
	Admitted, Den TopCounts
}

// TopWindow is what a store holds of one limit in one window, merged over
// every flush of every replica.
type TopWindow struct {
	Admitted, Den TopCounts
}
