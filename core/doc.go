// Package core is sluice's engine: exact token buckets kept in Redis and
// shared by every replica of a service, decided in one atomic Lua call.
//
// A [Limit] says how many events a key may have per period and how many at
// once. A [Limiter] holds the Redis client and the engine's settings; each
// call names its key and its limits, so one Limiter serves any number of
// middlewares, routes and tenants:
//
//	lim, err := core.New(rdb) // no I/O here
//	res, err := lim.Allow(ctx, "tenant:acme", core.PerMinute(600))
//	if err == nil && !res.Allowed {
//		// deny; res.RetryAfter says when to come back
//	}
//
// # Semantics
//
// Each limit is a token bucket of Burst tokens refilled continuously at
// Rate/Period. Over any interval of length t after a full bucket, at most
// Burst + floor(t*Rate/Period) unit requests are admitted, and a client that
// sends no faster than Rate/Period is never denied: the state is the bucket's
// theoretical arrival time held in integer ticks (a GCRA), so no fraction of
// a token is ever lost or invented, to the microsecond. Several limits on one
// key (10/s and 1000/h, say) are checked and consumed together: the request
// is admitted only if every limit admits it, and a denial consumes nothing.
//
// A limit may instead refill in steps (see [Refill]): Rate tokens at once
// every Period ([PerInterval]), or a quota restored whole at each calendar
// day, week or month in a time zone ([PerCalendarDay], [PerCalendarWeek],
// [PerCalendarMonth]). Stepped and continuous limits mix in one rule and one
// atomic call. Go computes a calendar's boundaries (Redis has no time-zone
// database) and the script picks the one holding Redis's clock, so for
// these the limiter's clock and Redis's must agree within one period.
//
// Every decision is one EVALSHA (EVAL after a NOSCRIPT), and the script reads
// Redis's clock (TIME), so replicas never need synchronised clocks and a
// client clock that jumps changes nothing. A bucket's key expires exactly
// when the bucket would be full again, never after a fixed time.
//
// # Keys
//
// Stored names are <prefix>{<tag>}<fingerprint>:<key>. The tag is derived
// from a hash of the caller's key, so callers never steer Redis Cluster
// slots, and all of one bucket's state lives in one slot; keys longer than
// 128 bytes are stored as a digest, so memory per bucket is bounded whatever
// clients send. The fingerprint names the set of limits: the same key under
// different limits has separate buckets.
//
// # Errors
//
// A denial is a [Result] with Allowed false and a nil error. Errors are for
// bad input ([ErrInvalidLimit], an empty key) and for store failures
// ([ErrUnavailable]); a caller's own cancelled context is returned as is and
// is never counted as a store failure.
//
// # Where things live
//
// The package is the engine: it decides, and asks a store. Below it, in
// packages users cannot import, are the Redis store
// (core/internal/redisstore: the only code that talks to Redis, with its
// Lua scripts) and what the two share (core/internal/model: the integer
// limits, calendars, a decision and the records a store is asked). The
// store cannot import the engine, so calls go down and answers come back.
// docs/architecture.md follows one request through them.
package core
