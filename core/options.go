package core

import (
	"fmt"
	"log/slog"
	"time"
)

// FailurePolicy says how a limiter decides while its store is unavailable.
type FailurePolicy int8

const (
	// FallbackLocal decides with per-replica buckets in process memory,
	// sized by [WithFallbackReplicas] or [WithFallbackLimit]. Results are
	// marked Degraded. This is the default: traffic stays limited, at
	// about the global rate if the fallback is sized for the replica count.
	FallbackLocal FailurePolicy = iota
	// FailOpen admits every request, marked Degraded. Choose it only when
	// availability matters more than protection.
	FailOpen
	// FailClosed refuses every request with an error wrapping
	// [ErrUnavailable] (middleware answers 503). Choose it when an
	// unlimited request is worse than a refused one.
	FailClosed
)

// String returns "fallback_local", "fail_open" or "fail_closed".
func (p FailurePolicy) String() string {
	switch p {
	case FallbackLocal:
		return "fallback_local"
	case FailOpen:
		return "fail_open"
	case FailClosed:
		return "fail_closed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int8(p))
}

// Option configures a [Limiter].
type Option func(*options)

type options struct {
	prefix      string
	slotKey     []byte
	penalty     time.Duration
	policy      FailurePolicy
	timeout     time.Duration
	replicas    int
	fallback    func(Limit) Limit
	capacity    int
	denyCache   bool
	observer    Observer
	logger      *slog.Logger
	breaker     Breaker
	replicasSet bool
	fleet       Fleet
	inflight    int
	ownConns    bool // WithOwnConnections
	ack         ackConfig
	clock       func() time.Time
	top         TopTalkers // WithTopTalkers
	topOn       bool
	onThreshold func(ThresholdEvent) // WithThresholdHandler
}

func defaultOptions() options {
	return options{
		prefix:    "sluice:",
		timeout:   50 * time.Millisecond,
		replicas:  1,
		capacity:  100_000,
		denyCache: true,
		breaker:   Breaker{Failures: 3, Probe: 100 * time.Millisecond, Successes: 3},
		inflight:  4,
	}
}

func (o *options) validate() error {
	if err := validatePrefix(o.prefix); err != nil {
		return err
	}
	if o.slotKey != nil && len(o.slotKey) < 16 {
		return fmt.Errorf("core: WithSlotKey: the key is %d bytes, want at least 16", len(o.slotKey))
	}
	if err := o.ack.Validate(o.timeout); err != nil {
		return err
	}
	switch {
	case o.penalty < 0:
		return fmt.Errorf("core: WithPenalty: negative duration %s", o.penalty)
	case o.penalty > MaxPenalty:
		return fmt.Errorf("core: WithPenalty: %s is longer than the maximum of %s (100 years)", o.penalty, MaxPenalty)
	case o.policy < FallbackLocal || o.policy > FailClosed:
		return fmt.Errorf("core: WithFailurePolicy: unknown policy %d", o.policy)
	case o.timeout < 0:
		return fmt.Errorf("core: WithTimeout: negative duration %s", o.timeout)
	case o.replicas < 1 || o.replicas > 100_000:
		return fmt.Errorf("core: WithFallbackReplicas: %d replicas, want 1 to 100000", o.replicas)
	case o.inflight < 0:
		return fmt.Errorf("core: WithBatching: %d round trips, want 0 or more", o.inflight)
	case o.capacity < numShards:
		return fmt.Errorf("core: WithLocalCapacity: %d entries, want at least %d", o.capacity, numShards)
	}
	if err := o.validateFleet(); err != nil {
		return err
	}
	return o.breaker.validate()
}

// WithClock sets the clock a limiter made by [NewMemory] reads, so a test
// can stop or step time and check exact Retry-After and reset values:
//
//	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
//	lim, err := core.NewMemory(core.WithClock(func() time.Time { return now }))
//
// [New] refuses it: a Redis-backed limiter reads Redis's clock, so that
// replicas whose clocks differ still share one. Tests usually freeze the
// clock or step it forward; nil means the default.
//
// Default: the process's monotonic clock.
func WithClock(now func() time.Time) Option { return func(o *options) { o.clock = now } }

// WithPrefix sets the prefix of every Redis key the limiter writes. It may
// not contain braces, since the library owns the key's hash tag, and is at
// most 64 bytes.
//
// Default: "sluice:".
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// MaxPenalty is the longest penalty lock [WithPenalty] accepts, 100 years:
// the lock's end must stay an exact integer of microseconds in the script's
// arithmetic, and RetryAfter a valid time.Duration.
const MaxPenalty = 100 * 365 * 24 * time.Hour

// WithPenalty makes a denial lock its key for d: until the lock ends every
// request on the key is denied, on every replica, with RetryAfter set to the
// time left. Requests during the lock do not extend it. Zero disables the
// lock. It is the default of every rule: [Rule.WithPenalty] sets another
// for one rule (and a middleware's WithPenalty for one middleware). [New]
// returns an error for a negative d or one above [MaxPenalty].
//
// Default: 0 (no lock).
func WithPenalty(d time.Duration) Option { return func(o *options) { o.penalty = d } }

// WithFailurePolicy sets how the limiter decides while Redis is unavailable.
//
// Default: [FallbackLocal].
func WithFailurePolicy(p FailurePolicy) Option { return func(o *options) { o.policy = p } }

// WithTimeout sets the time budget of one Redis call. A caller whose own
// context ends sooner keeps its shorter deadline. When Redis does not answer
// within the budget, the decision follows the failure policy, so a dead or
// hung Redis costs each request at most this long, and nothing at all once
// the circuit breaker has opened. A call sent again (its answer lost to a
// pause of this process, or an acquisition's to a timeout) shares what is
// left of its budget, and is sent only with a quarter of it left: one call
// spends at most one budget. Zero leaves only the caller's deadline and
// the client's own timeouts, and nothing is sent again.
//
// Default: 50ms.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithFallbackReplicas sizes the local fallback for a service of n
// replicas: each replica enforces 1/n of every limit (Rate per n*Period, and
// Burst/n rounded up), so that together they admit about the global limit
// while Redis is down, if the load balancer spreads traffic evenly. A
// replica that receives more than its share of a key's traffic denies
// earlier than Redis would have; set n lower to trade protection for
// fewer false denials. It replaces [WithFallbackLimit].
//
// A limit whose share cannot be counted exactly (1,000 a year over 300
// replicas overflows the period, 1 per 10 years over 4 exceeds the exact
// range) is never refused for it: its fallback keeps the limit's own rate
// with the burst share, and the limiter logs that once per limit. The same
// holds for an invalid limit from [WithFallbackLimit].
//
// Default: the fallback follows the implicit fleet: every limiter on the
// same Redis and key prefix, counted through its decisions (see
// [WithFleet]); until a replica has counted it, the whole limit.
func WithFallbackReplicas(n int) Option {
	return func(o *options) { o.replicas, o.fallback, o.replicasSet = n, nil, true }
}

// WithFallbackLimit sets the local fallback's limit for each global limit,
// for example an absolute per-replica limit. f must be safe for concurrent
// use and return a valid limit; it is called once per distinct limit. It
// replaces [WithFallbackReplicas].
//
// Default: see [WithFallbackReplicas].
func WithFallbackLimit(f func(global Limit) Limit) Option {
	return func(o *options) { o.fallback, o.replicasSet = f, f != nil }
}

// WithLocalCapacity bounds the number of keys held in process memory, in the
// fallback buckets and in the deny cache each (and in the store of a
// [NewMemory] limiter). When full, inserting a key evicts a full bucket or an
// expired denial if it finds one among a few sampled, else the sampled entry
// closest to being full; limited and locked keys go last.
//
// Memory is bounded in bytes too, whatever the keys' length: a key of up to
// 64 bytes is held as a copy, a longer one as a 128-bit digest inside the
// entry. On 64-bit platforms an entry costs at most about 224 bytes in the
// fallback and 192 in the deny cache, plus the copy of a short key (at most
// 64 bytes): with the default capacity, at most about 29 MB and 26 MB.
//
// Default: 100000.
func WithLocalCapacity(n int) Option { return func(o *options) { o.capacity = n } }

// WithDenyCache turns the local deny cache on or off. When Redis denies a
// key until time t, the limiter denies that key's requests locally until t,
// with the exact RetryAfter, without asking Redis: a flood on one key then
// costs Redis about one call per refill. The cache never denies what Redis
// would admit: it is consulted only for single-token requests without a
// wait, and counts from the moment the request was sent.
//
// Default: on.
func WithDenyCache(on bool) Option { return func(o *options) { o.denyCache = on } }

// WithObserver sets the observer told of every decision and of the store's
// health (see [Observer]).
//
// Default: none.
func WithObserver(obs Observer) Option { return func(o *options) { o.observer = obs } }

// WithLogger sets the logger for state transitions (store unavailable, store
// recovered, a summary of a flapping store at most once per 10 s per node).
// The limiter never logs per request.
//
// Default: slog.Default() at the time of the transition.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithBatching sets how many Redis round trips may be under way at once;
// concurrent decisions beyond that are coalesced. A decision that finds a
// round trip free leads a batch: under load it first yields once, so that
// callers already runnable can queue behind it, then sends itself and its
// share of the queue in one script call (the whole queue if no other round
// trip is free, an even part otherwise). An idle limiter therefore adds no
// latency, and a busy one spends one Redis command on many decisions. Zero sends every
// decision on its own. On a single node or Sentinel failover client
// (*redis.Client) a batch is one script call; on *redis.ClusterClient and
// *redis.Ring it is one script call per hash tag (so per slot), all in one
// pipeline. Other Scripter implementations are not batched. Settlements
// ([Reservation.Settle]) are coalesced the same way, with the same number
// of round trips of their own: a batch holds decisions or settlements,
// never both.
//
// Default: 4.
func WithBatching(inflight int) Option { return func(o *options) { o.inflight = inflight } }

// WithOwnConnections makes a decision that goes to Redis alone (the usual
// case for an instance with one or two callers), and on a single server or
// Sentinel failover client a batch of decisions too (one script call),
// travel on connections the limiter dials itself, instead of through the
// client's pool: per Redis
// node, as many as [WithBatching]'s round trips (at least 4), opened with
// the client's own Dialer (so its TLS), credentials, DB and ClientName.
// Each such call skips what the pool adds to every command: a health
// check (one system call), the pool's bookkeeping, two socket deadlines,
// the client's hooks and its general reply reader. bench/README.md has
// what it saves: about a third of the client's CPU per lone decision in a
// fleet of instances with one caller each.
//
// What changes for you: the client's hooks (tracing, metrics of
// go-redis) do not see those calls; the limiter's [Observer] still does.
// Everything else still goes through the client: a Cluster's or Ring's
// batches (pipelines), settlements and every other operation, loading the
// script after NOSCRIPT, Cluster redirections (a MOVED or ASK answer is
// sent again through the client). A connection idle for a
// second is checked for a close by the server before it is used again,
// one idle past the client's ConnMaxIdleTime or older than its
// ConnMaxLifetime is dialled anew, and one that fails is closed and
// dialled again by the next call; a call
// that finds all of them busy goes through the client. A Sentinel
// failover client's own connections follow a failover: a READONLY (or
// LOADING, MASTERDOWN) answer, which means the script did not run, closes
// them and sends the decision again through the client; the next is
// dialled through Sentinel. [Limiter.Close] closes them.
//
// [New] refuses it for a client whose connections the limiter cannot
// reproduce: one with an OnConnect hook or a StreamingCredentialsProvider,
// or a Scripter that is not a go-redis *redis.Client, *redis.ClusterClient
// or *redis.Ring. [NewMemory] ignores it.
//
// Default: false.
func WithOwnConnections(on bool) Option { return func(o *options) { o.ownConns = on } }

// Breaker sets the circuit breaker the limiter keeps per store node (see
// [WithBreaker]). A zero field keeps its default.
type Breaker struct {
	// Failures is how many failed store calls in a row open the breaker:
	// the node's keys are then decided under the failure policy, without
	// waiting for the store. Calls that were under way together and fail
	// together count as one (a burst of callers meeting one stall of the
	// store is one failure, not hundreds), so the breaker opens once the
	// store has failed Failures calls sent one after another. Default 3;
	// at most 1000.
	Failures int
	// Probe is how often, while the breaker is open, one request is sent
	// to the store to find out whether it is back. Default 100ms; from
	// 1ms to 1m.
	Probe time.Duration
	// Successes is how many good probes in a row close the breaker again.
	// More than one keeps a store that answers only some calls from
	// costing every other request the time budget. Default 3; at most 100.
	Successes int
}

// WithBreaker sets the circuit breaker kept per store node: when it opens,
// how often it probes, when it closes. A node that recovers is used again
// after Successes probes, about (Successes−1)·Probe after it answers.
//
// Default: Breaker{Failures: 3, Probe: 100 * time.Millisecond, Successes: 3}.
func WithBreaker(b Breaker) Option {
	return func(o *options) {
		if b.Failures != 0 {
			o.breaker.Failures = b.Failures
		}
		if b.Probe != 0 {
			o.breaker.Probe = b.Probe
		}
		if b.Successes != 0 {
			o.breaker.Successes = b.Successes
		}
	}
}

func (b Breaker) validate() error {
	switch {
	case b.Failures < 1 || b.Failures > 1000:
		return fmt.Errorf("core: WithBreaker: Failures is %d, want 1 to 1000", b.Failures)
	case b.Probe < time.Millisecond || b.Probe > time.Minute:
		return fmt.Errorf("core: WithBreaker: Probe is %s, want 1ms to 1m", b.Probe)
	case b.Successes < 1 || b.Successes > 100:
		return fmt.Errorf("core: WithBreaker: Successes is %d, want 1 to 100", b.Successes)
	}
	return nil
}

// WithSlotKey makes the hash tag of every bucket's stored name, which
// decides its Redis Cluster slot (and Ring shard), a keyed hash of the
// caller's key (HMAC-SHA256 under secret) instead of an unkeyed one.
// Clients choose many keys themselves (an address, a tenant header); with
// the unkeyed tag a client can grind, in seconds, keys that all land on
// one slot, and so on one master; without the secret it cannot tell where
// a key lands. Every replica must be given
// the same secret, by configuration (a Kubernetes secret), or they would
// name every bucket differently; changing it renames every bucket (each
// key starts on a full bucket). It costs one HMAC-SHA256 of the key per
// decision. New returns an error for a secret shorter than 16 bytes.
//
// Default: no key (an unkeyed 16-bit FNV-1a hash of the key).
func WithSlotKey(secret []byte) Option {
	return func(o *options) { o.slotKey = append([]byte{}, secret...) }
}
