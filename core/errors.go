package core

import (
	"errors"

	"github.com/sluicehq/sluice/core/internal/model"
)

// ErrInvalidLimit is returned (wrapped, with the field at fault named) for a
// limit that cannot be enforced: a non-positive Rate, Burst or Period, values
// too large to count exactly, or a request whose cost is not positive or
// exceeds the limit's Burst.
var ErrInvalidLimit = errors.New("core: invalid limit")

// ErrUnavailable is returned (wrapped with the store's error) when the store
// could not decide and the failure policy is [FailClosed]. A denial is never
// reported as ErrUnavailable, and a store failure is never reported as a
// denial. Its text is "core: store unavailable" (it is declared below the
// engine, where the Redis store can wrap it too).
var ErrUnavailable = model.ErrUnavailable

// ErrLeaseLost is returned by [Lease.Release] when the lease's slot was
// gone before it was released: its renewals failed for longer than the
// lease (Redis was unreachable), or Redis forgot it (a restart, a failover
// that lost writes) and other requests had taken its slot by the time a
// renewal re-asserted it. Another request may have held the slot meanwhile,
// so the cap may have been exceeded. Its text is "core: the slot's lease
// expired before it was released".
var ErrLeaseLost = model.ErrLeaseLost
