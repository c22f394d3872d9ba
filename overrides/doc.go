// Package overrides keeps per-key overrides that operators change at run
// time (a tenant's plan, an allow or a deny entry), shared by every replica
// of a service through its limiter's Redis.
//
// A [Set] is read through a local copy that one goroutine keeps current,
// so a lookup on the request path does no I/O; a change made on any
// replica applies on every replica within the refresh interval (default
// 1 s). The middleware applies a set with its WithOverrides option
// (package policy and every adapter), and the sluice command changes one
// from a shell.
//
// Overrides are not the engine: package core decides, and this package
// is a configuration store beside it. Its calls to Redis take the
// limiter's one road all the same (its budget, routing, NOSCRIPT and
// observer, as operations of kind core.OpOverrides).
package overrides
