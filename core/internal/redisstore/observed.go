package redisstore

import "time"

// What the store tells its observer: core.StoreCall and core.StoreOutage,
// field for field, so that the engine converts one to the other.

// Call describes one call to a store node.
type Call struct {
	// Node names the node that was asked (see [Outage.Node]).
	Node string
	// Op is the kind of operation: one of the Op constants ([OpDecide],
	// [OpSettle], [OpAcquire], ...).
	Op string
	// Latency is the call's I/O time: for a batched decision, its batch's.
	Latency time.Duration
	// Err is the call's error, nil on success; [Reason] classifies it.
	Err error
	// Paused reports a timeout that overlapped a pause of this process
	// (descheduled by a busy machine, throttled by its CPU quota, stopped
	// by the garbage collector): it says nothing of the node, so it is
	// charged to no breaker, and the call is sent once more. Many of them
	// mean the process is starved of CPU, not that Redis is slow.
	Paused bool
}

// Outage describes an outage of one store node: the time its breaker
// was open.
type Outage struct {
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
