package core

import (
	"time"
)

// Source says what made a decision.
type Source int8

const (
	// SourceStore is the store: Redis, or process memory for a limiter
	// made by [NewMemory].
	SourceStore Source = iota
	// SourceDenyCache is the local deny cache: Redis denied the key
	// earlier and said until when (see [WithDenyCache]).
	SourceDenyCache
	// SourceFallback is the local fallback bucket, used while the store
	// is unavailable under [FallbackLocal].
	SourceFallback
	// SourceFailOpen is an admission without any check, while the store
	// is unavailable under [FailOpen].
	SourceFailOpen
	// SourceFailClosed is a refusal (an [ErrUnavailable] error) while the
	// store is unavailable under [FailClosed].
	SourceFailClosed
	// SourceDenyList is a refusal by a deny list, before any decision
	// (the middleware's WithDeny, or a deny entry of a set of package
	// overrides); its Result is zero, as a SourceFailClosed one is. See
	// [Limiter.ObserveDenyList].
	SourceDenyList
)

// String returns the source's name as used in metric labels: "store",
// "deny_cache", "fallback", "fail_open", "fail_closed" or "deny_list".
func (s Source) String() string {
	switch s {
	case SourceStore:
		return "store"
	case SourceDenyCache:
		return "deny_cache"
	case SourceFallback:
		return "fallback"
	case SourceFailOpen:
		return "fail_open"
	case SourceFailClosed:
		return "fail_closed"
	case SourceDenyList:
		return "deny_list"
	case SourceLease:
		return "lease"
	}
	return "unknown"
}

// Observer is told about every decision and every change of a store node's
// health. The limiter calls it synchronously on the request path, so its
// methods must be fast and safe for concurrent use; they must not block.
// The sluiceprom package provides one that exports Prometheus metrics.
type Observer interface {
	// ObserveDecision is called once per decision, with its result and
	// what made it. A [SourceFailClosed] decision has a zero Result. A
	// reservation ([Limiter.Wait]) is observed when it is made, before
	// the wait, which its Result's Wait gives. A decision of a rule with
	// shadow limits carries theirs in res.Shadow ([Rule.WithShadowLimits]):
	// one call for the decision and its shadow limits.
	ObserveDecision(res Result, src Source)
	// ObserveStore is called after each store call of every kind (see
	// [StoreCall.Op]). A call the caller cancelled is not reported.
	ObserveStore(call StoreCall)
	// ObserveDegraded is called when a node's breaker opens: the node is
	// judged unavailable and its keys are decided under the failure
	// policy. Every outage is reported, also those the log summarises.
	ObserveDegraded(outage StoreOutage)
	// ObserveRecovered is called when the node's breaker closes again,
	// with the outage's length and how many decisions it degraded.
	ObserveRecovered(outage StoreOutage)
}

// ConcurrencyObserver is an [Observer] that is also told about
// concurrency caps. The limiter finds it with a type assertion on the
// Observer given to [WithObserver], so an Observer written without it
// needs no change; the sluiceprom and sluiceotel packages implement it.
// Its methods have an Observer's constraints: fast, non-blocking, safe for
// concurrent use.
type ConcurrencyObserver interface {
	Observer
	// ObserveAcquire is called once per [Concurrency.Acquire] that
	// returns a Lease: acquired says whether a slot was taken (false: the
	// cap refused), src what decided ([SourceStore], [SourceFallback] or
	// [SourceFailOpen]).
	ObserveAcquire(limit ConcurrencyLimit, acquired bool, src Source)
	// ObserveRelease is called once per slot given back by
	// [Lease.Release], whatever the store answered (a slot Redis cannot
	// be told of expires within its lease). Acquisitions less releases
	// are the slots this process holds.
	ObserveRelease(limit ConcurrencyLimit)
}

// StoreCall describes one call to a store node.
type StoreCall struct {
	// Node names the node that was asked (see [StoreOutage.Node]).
	Node string
	// Op is the kind of operation: one of the Op constants ([OpDecide],
	// [OpSettle], [OpAcquire], ...).
	Op string
	// Latency is the call's I/O time: for a batched decision, its batch's.
	Latency time.Duration
	// Err is the call's error, nil on success; [ErrorReason] classifies it.
	Err error
	// Paused reports a timeout that overlapped a pause of this process
	// (descheduled by a busy machine, throttled by its CPU quota, stopped
	// by the garbage collector): it says nothing of the node, so it is
	// charged to no breaker, and the call is sent once more if enough of
	// its budget is left (see [WithTimeout]). Many of them
	// mean the process is starved of CPU, not that Redis is slow.
	Paused bool
}

// StoreOutage describes an outage of one store node: the time its breaker
// was open.
type StoreOutage struct {
	// Node names the failure domain: a Cluster master's address, a
	// single server's address, "sentinel" for a failover client, "ring"
	// for a Ring (its shards share one breaker), "cluster" for Cluster
	// keys whose master was unknown, or "redis" for any other client.
	Node string
	// Start is when the breaker opened.
	Start time.Time
	// Err is the error that opened the breaker (set for ObserveDegraded).
	Err error
	// Duration is the outage's length (set for ObserveRecovered).
	Duration time.Duration
	// Degraded counts the decisions made without the node during the
	// outage (set for ObserveRecovered).
	Degraded int64
}

// Reasons [ErrorReason] returns. Each names a class of store failure that
// calls for a different response from an operator.
const (
	ReasonTimeout     = "timeout"     // the budget or the caller's deadline ran out
	ReasonRefused     = "refused"     // nothing listens at the address
	ReasonConnection  = "connection"  // the connection broke (reset, EOF, closed pool)
	ReasonLoading     = "loading"     // the server is loading its dataset
	ReasonReadOnly    = "readonly"    // a replica answered a write: a failover is in progress
	ReasonClusterDown = "clusterdown" // the Cluster cannot serve the slot
	ReasonOOM         = "oom"         // the server is at maxmemory
	ReasonScript      = "script"      // the script failed (a key of another type, a busy script)
	ReasonAuth        = "auth"        // authentication failed (NOAUTH, WRONGPASS)
	ReasonNoPerm      = "noperm"      // the Redis user may not run a command or touch a key (NOPERM)
	ReasonOther       = "other"       // anything else
	// ReasonPaused is a timeout that overlapped a pause of this process,
	// charged to no node (see [StoreCall.Paused]); [StoreCall.Reason]
	// gives it, ErrorReason never does.
	ReasonPaused = "paused"
)

// Reason classifies the call's outcome for metrics: [ReasonPaused] for a
// timeout excused by a pause of this process, else [ErrorReason] of its
// error ("" for success).
func (c StoreCall) Reason() string {
	if c.Paused {
		return ReasonPaused
	}
	return ErrorReason(c.Err)
}

// ObserveDenyList tells the limiter's observer (see [WithObserver]) of a
// request refused by a deny list before any decision, as a decision of
// source [SourceDenyList] with a zero Result, marked DryRun when dryRun is
// true. Middleware calls it; it costs nothing without an observer.
func (l *Limiter) ObserveDenyList(dryRun bool) {
	if l.obs != nil {
		l.obs.ObserveDecision(Result{DryRun: dryRun}, SourceDenyList)
	}
}

// Operation kinds, as [StoreCall.Op] reports them.
const (
	OpDecide    = "decide"    // a decision or a reservation (Allow, Wait, Reserve)
	OpPeek      = "peek"      // Peek: a decision of cost 0 that writes nothing
	OpSettle    = "settle"    // a reservation's settlement
	OpAcquire   = "acquire"   // a concurrency slot taken
	OpRelease   = "release"   // a concurrency slot given back
	OpRenew     = "renew"     // a concurrency lease renewed by the lease keeper
	OpReset     = "reset"     // Reset: a key's state deleted
	OpLock      = "lock"      // Rule.Lock: a key locked for a time
	OpHeartbeat = "heartbeat" // the fleet heartbeat (WithFleet)
	OpPath      = "path"      // a path of keys decided as one (PathRule)
	OpOverrides = "overrides" // an overrides set read or changed (package overrides)
	OpTop       = "top"       // top talkers flushed to a window, or read (WithTopTalkers, Limiter.Top)
	OpThreshold = "threshold" // a key's warning marker set, when it crossed a warning threshold (see Rule.WithWarning)
)
