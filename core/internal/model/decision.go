package model

// Decision is the outcome of one call, durations in microseconds.
type Decision struct {
	Allowed   bool
	Locked    bool
	Remaining int64 // unit requests the deciding limit could still take
	Retry     int64 // until the same request could be admitted (denied only)
	Reset     int64 // until the deciding limit's bucket is full again
	Wait      int64 // how long an admitted reservation must wait
	Next      int64 // until a unit request could be admitted, after this decision
	Index     int   // the limit that decided: the one that denied, else the one with the fewest tokens left
	Epoch     int64 // the Redis store's: the epoch of a stepped key's hash tag as its script read it; 0: not read
	At        int64 // the Redis store's: the instant its script decided at (TIME), unix microseconds; 0: not said
	Reason    int   // a path's shared level's denial beyond its bucket: 1 fair share, 2 a class's reserve; 0: none

	// Of a plan with shadow limits (Plan.Shadow) only; zero otherwise.
	Shadow     uint8 // bit i: shadow limit i would have denied the request
	ShadowNext int64 // the least of the shadow decisions' Next: until one of them could admit a unit request
}

// AddShadow folds s, the decision of shadow limit i (Plan.Shadow[i]) of
// the same request, into d: one of the store's answers for a plan with
// shadow limits. A shadow limit's decision that failed is folded as a
// zero decision with Allowed set: it denied nothing, and says nothing of
// when a request could pass.
func (d *Decision) AddShadow(i int, s Decision) {
	if !s.Allowed {
		d.Shadow |= 1 << i
	}
	if i == 0 || s.Next < d.ShadowNext {
		d.ShadowNext = s.Next
	}
}
