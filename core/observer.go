package core

import "time"

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
)

// String returns the source's name as used in metric labels: "store",
// "deny_cache", "fallback", "fail_open" or "fail_closed".
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
	}
	return "unknown"
}

// Observer is told about every decision and every change of the store's
// health. The limiter calls it synchronously on the request path, so its
// methods must be fast and safe for concurrent use; they must not block.
// The sluiceprom package provides one that exports Prometheus metrics.
type Observer interface {
	// ObserveDecision is called once per decision, with its result and
	// what made it. A [SourceFailClosed] decision has a zero Result.
	ObserveDecision(res Result, src Source)
	// ObserveStore is called after each store call with its latency and
	// its error (nil on success). A call the caller cancelled is not
	// reported.
	ObserveStore(latency time.Duration, err error)
	// ObserveDegraded is called when the store is judged unavailable and
	// the limiter starts deciding under its failure policy.
	ObserveDegraded(err error)
	// ObserveRecovered is called when the store answers again, with how
	// long the outage lasted.
	ObserveRecovered(outage time.Duration)
}
