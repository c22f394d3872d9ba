package core

import "errors"

// ErrInvalidLimit is returned (wrapped, with the field at fault named) for a
// limit that cannot be enforced: a non-positive Rate, Burst or Period, values
// too large to count exactly, or a request whose cost is not positive or
// exceeds the limit's Burst.
var ErrInvalidLimit = errors.New("core: invalid limit")

// ErrUnavailable is returned (wrapped with the store's error) when the store
// could not decide and the failure policy is [FailClosed]. A denial is never
// reported as ErrUnavailable, and a store failure is never reported as a
// denial.
var ErrUnavailable = errors.New("core: store unavailable")
