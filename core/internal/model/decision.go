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
}
