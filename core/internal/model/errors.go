package model

import "errors"

// ErrUnavailable is core.ErrUnavailable: a store could not decide (see
// its documentation there).
var ErrUnavailable = errors.New("core: store unavailable")

// ErrLeaseLost is core.ErrLeaseLost: a concurrency slot was gone before
// it was released (see its documentation there).
var ErrLeaseLost = errors.New("core: the slot's lease expired before it was released")

// ErrInMemory answers the calls that exist for Redis alone, which the
// engine never makes of a NewMemory limiter.
var ErrInMemory = errors.New("core: not a Redis-backed limiter")

// MaxLeaseLife bounds a token lease's life, in microseconds: a key that
// cools gives its tokens back within about a quarter of it.
const MaxLeaseLife = 500_000
