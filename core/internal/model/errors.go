package model

import "errors"

// ErrUnavailable is core.ErrUnavailable: a store could not decide (see
// its documentation there).
var ErrUnavailable = errors.New("core: store unavailable")

// ErrLeaseLost is core.ErrLeaseLost: a concurrency slot was gone before
// it was released (see its documentation there).
var ErrLeaseLost = errors.New("core: the slot's lease expired before it was released")

// ErrPaused marks a store call that timed out while this process was
// paused: the failure is nobody's, Redis may or may not have applied the
// call, and it may be sent again where that is safe (an acquisition, by
// its lease id; a settlement, by its marker).
var ErrPaused = errors.New("core: the call timed out while this process was paused")

// ErrInMemory answers the calls that exist for Redis alone, which the
// engine never makes of a NewMemory limiter.
var ErrInMemory = errors.New("core: not a Redis-backed limiter")

// MaxLeaseLife bounds a token lease's life, in microseconds: a key that
// cools gives its tokens back within about a quarter of it.
const MaxLeaseLife = 500_000
