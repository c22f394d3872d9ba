package core

import (
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
)

// This file is the one place of the engine that names Redis: New builds
// the Redis store (package core/internal/redisstore) and hands it down the
// engine's options; from then on the engine sees it through the store
// interface alone (stores.go).

// New returns a Limiter that keeps its buckets in rdb, which may be any
// go-redis v9 client: *redis.Client, *redis.ClusterClient, *redis.Ring, a
// failover (Sentinel) client or a redis.UniversalClient.
//
// New does no network I/O. It returns an error, never a panic, for a nil
// client or an invalid option.
//
// New takes the client as it is, and keeps the limiter's time budget (see
// [WithTimeout]) whatever the client's options. Two go-redis options make
// it better, and New logs once, at Warn level, which of them the client
// lacks and why:
//   - ContextTimeoutEnabled: true. go-redis otherwise ignores context
//     deadlines, so each decision runs in a goroutine of its own, the
//     caller stops waiting at the budget and the call ends by the client's
//     own timeouts in the background, and decisions are not batched.
//   - MaxRetries: -1. go-redis retries a command whose reply was lost, and
//     a retried decision charges its bucket twice (the request may then be
//     denied early; it is never admitted twice).
//
// On a *redis.ClusterClient, every store failure on a master makes the
// limiter ask go-redis to reload its slot map (at most every 100 ms), so a
// failed-over master's keys return to Redis soon after the failover with
// go-redis's default ClusterStateReloadInterval. docs/topologies.md has
// each topology's client settings.
//
// On a *redis.ClusterClient the limiter keeps a circuit breaker per master
// (found from go-redis's slot map), so a failing master sends only its own
// keys to the failure policy; other clients have one breaker.
func New(rdb redis.Scripter, opts ...Option) (*Limiter, error) {
	if isNil(rdb) {
		return nil, errors.New("core: nil Redis client")
	}
	l, o, err := newLimiter(opts)
	if err != nil {
		return nil, err
	}
	if o.clock != nil {
		return nil, errors.New("core: WithClock applies to NewMemory only; a Redis-backed limiter reads Redis's clock")
	}
	// The store reads the engine's clock through l, so a clock replaced
	// after New (tests do) is the store's too; the decisions' own calls
	// carry their time.
	now := func() int64 { return l.now() }
	if o.ownConns {
		if err := redisstore.LaneProblem(rdb); err != nil {
			return nil, err
		}
	}
	cfg := redisstore.Config{Prefix: o.prefix, SlotKey: o.slotKey, Budget: o.timeout, Inflight: o.inflight, Now: now, Ack: o.ack, OwnConns: o.ownConns,
		Breaker: redisstore.Breaker{Failures: o.breaker.Failures, Successes: o.breaker.Successes, Probe: o.breaker.Probe}}
	up := redisstore.Up{Log: l.log, Note: l.outageNote}
	if o.observer != nil {
		up.Obs = storeObserver{o.observer}
	}
	l.store = redisstore.New(rdb, cfg, up)
	l.remote = true
	l.startTop()
	if o.policy == FallbackLocal {
		l.local.owed = newOwedStore(o.capacity)
	}
	switch {
	case o.fleet.Name != "":
		unmet := UnmetFleet // WithFallbackReplicas, if given, is the count to assume
		if o.replicasSet {
			unmet = o.replicas
		}
		l.fleet = newFleet(l.store, o.fleet, o.replicas, unmet)
	case !o.replicasSet && o.fallback == nil && o.policy == FallbackLocal:
		// Nothing sizes the fallback: by default it follows the fleet
		// of limiters on this Redis and prefix, counted by decisions.
		l.fleet = newImplicitFleet(l.store)
	}
	if advice := redisstore.ClientAdvice(rdb, l.timeout); len(advice) > 0 {
		l.log().Warn("sluice: the Redis client's options cost the limiter safety or speed; docs/production.md has the recommended client",
			"node", l.store.(*redisstore.Store).Node(), "advice", strings.Join(advice, "; "))
	}
	return l, nil
}

// WithReplicaAck makes the limiter wait, after every decision's script
// call (Allow, Wait, Reserve and their batches), until replicas replicas
// have acknowledged the call's writes, or timeout has passed. Other
// operations are not waited on: settlements, paths, concurrency slots and
// token leases (a failover that loses their last writes is answered in
// docs/topologies.md). The wait is Redis's WAIT command, sent in the same pipeline and on
// the same connection as the script (one round trip): a single server or
// Sentinel failover client's pipeline, and on a Cluster or Ring the pipeline
// of the master or shard that holds the keys.
//
// What it bounds: replication is asynchronous, so without it a master that
// crashes loses the decisions it acknowledged but had not yet sent to a
// replica, and the promoted replica's buckets are fuller than they should
// be (up to one burst per key, or more for a limit that refills slower than
// the failover takes). With it, a decision is returned only once a replica
// holds it: a crash loses only decisions whose wait fell short, and those
// are counted (see [Limiter.ReplicaAckMisses]). It does not cover a
// graceful failover (SENTINEL FAILOVER), in which the old master keeps
// accepting writes, with no replica left to acknowledge them, until clients
// switch; set min-replicas-to-write on the master for that.
//
// What it costs: every call waits for a replica's acknowledgement (a round
// trip from master to replica and back) and holds its connection meanwhile;
// docs/topologies.md has the throughput we measured. A call that wrote
// nothing (a denial without a penalty) is answered at once by Redis, unless
// the connection's earlier writes are still unacknowledged.
//
// When fewer replicas than asked acknowledge within timeout, the decision
// stands: Redis has already applied it, and undoing or repeating it would
// charge the bucket twice. It is not a store failure either: a replica down
// (or a promoted replica with no replica of its own yet) would otherwise
// send every key to the fallback for as long as it lasts. Instead the
// decision is counted in [Limiter.ReplicaAckMisses], and the limiter logs
// once that replicas stopped acknowledging and once that they are back (per
// Cluster master). Until they are back, one call per node every 100ms waits
// as a probe and the others are sent without a wait (and counted), so that
// a missing replica does not cost every call the timeout. The same holds
// when the wait's reply is lost after the script's: the decision stands and
// is counted.
//
// timeout is counted in whole milliseconds (rounded down); each call's wait
// is also cut to end a millisecond before the call's budget. Redis notices
// an expired WAIT only when its event loop wakes, which an idle server does
// hz times a second (10 by default): a wait that falls short can last up to
// about 100ms longer than asked, and is then cut by the budget. A call whose
// keys moved to another Cluster master (MOVED, ASK) is decided through the
// Cluster client, which follows the redirect, without a wait, and counted.
// Other redis.Scripter implementations are never waited on, and every
// decision they make is counted. [New] returns an error for replicas below
// 1, a timeout below 1ms, or one longer than the budget ([WithTimeout]).
//
// Default: off (no wait).
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(o *options) { o.ack = ackConfig{Replicas: replicas, Timeout: timeout, Set: true} }
}

// ackConfig is WithReplicaAck's setting, which New hands the store.
type ackConfig = redisstore.AckConfig

// validatePrefix checks WithPrefix's prefix: the start of every name the
// store writes.
func validatePrefix(p string) error { return redisstore.ValidatePrefix(p) }

// ErrorReason classifies a store error for metrics and logs: one of the
// Reason constants; "" for nil.
func ErrorReason(err error) string { return redisstore.Reason(err) }

// storeObserver tells an Observer what the Redis store reports, in core's
// types: the store's records are core's field for field.
type storeObserver struct{ o Observer }

func (s storeObserver) ObserveStore(c redisstore.Call)       { s.o.ObserveStore(StoreCall(c)) }
func (s storeObserver) ObserveDegraded(g redisstore.Outage)  { s.o.ObserveDegraded(StoreOutage(g)) }
func (s storeObserver) ObserveRecovered(g redisstore.Outage) { s.o.ObserveRecovered(StoreOutage(g)) }
