package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/internal/storeops"
)

// store keeps the buckets and caps the engine decides on: a redisStore,
// shared by every replica ([New]), or a memStore, this process's memory
// ([NewMemory]). The engine (validation, token leases, the deny cache,
// the failure policy, results and the observer) is written once, above
// it; what differs between the two is only how a question is answered.
//
// Each method that asks returns a nil error for an answer, else a
// *noAnswer: the caller gave up on the call in flight (the engine returns
// the caller's context error), or the store could not answer (the engine
// decides under the failure policy, or reports [ErrUnavailable]). A
// memStore always answers.
type store interface {
	// decide decides a request of cost on key under p at now (the
	// limiter's clock): a decision, or a reservation that may wait up to
	// maxWait; a denial locks the key for penalty (microseconds).
	//
	// It is NewMemory's hot path, so its arguments and results are what
	// fits in registers: a call struct passed by value, or an error
	// interface beside the decision, are copied through memory instead,
	// which cost BenchmarkMemoryAllow 7% (20 ns).
	decide(ctx context.Context, key string, p *plan, cost, maxWait, penalty, now int64) (decision, *noAnswer)
	// peek decides a request of cost 0 on key at now, writing nothing.
	peek(ctx context.Context, key string, p *plan, now int64) (decision, *noAnswer)
	// decidePath decides a path of keys as one (see PathRule), and
	// returns the level its decision is about.
	decidePath(ctx context.Context, q *pathAsk) (decision, int, error)
	// reset deletes key's state under p.
	reset(ctx context.Context, p *plan, key string) error
	// acquire takes a slot of key under c's cap, or reports it full. A
	// slot the store may hold though nobody heard it was given comes
	// back as lost, for the lease keeper to give back.
	acquire(ctx context.Context, a slotAsk) (sl slot, lost *lostSlot, err error)
	// renew sends a round of the lease keeper's renewals and give backs,
	// setting each one's outcome.
	renew(ctx context.Context, round []*renewal)
	// lease takes or gives back a token lease (see hotlease.go).
	lease(ctx context.Context, lc *leaseCall) (leaseAnswer, *noAnswer)
	// heartbeat announces member id of fleet and returns how many members
	// are live (see WithFleet); leaveFleet removes it.
	heartbeat(ctx context.Context, fleet, id string, ttl time.Duration) (int64, error)
	leaveFleet(ctx context.Context, fleet, id string) error
	// lend returns what the store lends package overrides (see
	// store_lend.go); budget is the limiter's.
	lend(log func() *slog.Logger, budget time.Duration) storeops.Store
	// close stops the store's background tasks and waits for them.
	close()
	// release gives back r, a slot this store gave; ErrLeaseLost if it
	// had expired.
	release(ctx context.Context, r slotRef) error
	// settle applies a settlement of a reservation this store admitted,
	// and reports whether it was applied (false: it had been already).
	settle(ctx context.Context, a settleAsk) (bool, error)
	// inProcess reports whether every decision is made in this
	// process's memory: there are no round trips to save (token leases
	// change nothing) and nothing to fail.
	inProcess() bool
	// ready reports whether the store can answer (see Limiter.Ready).
	ready(ctx context.Context) error
	// ackMisses counts the calls whose writes replicas did not
	// acknowledge (see Limiter.ReplicaAckMisses).
	ackMisses() int64
}

// noAnswer is a store's error for a call it did not answer: the caller
// gave up on it while it was in flight (gone), or the store could not
// answer (the engine decides under the failure policy, or returns
// ErrUnavailable).
type noAnswer struct {
	node  string // the node's name
	cause error  // the store's failure; nil: its breaker kept the call from it
	gone  error  // the caller's own context error
}

func (e *noAnswer) Error() string {
	switch {
	case e.gone != nil:
		return e.gone.Error()
	case e.cause == nil:
		return "the circuit breaker of node " + e.node + " is open"
	}
	return e.cause.Error()
}

func (e *noAnswer) Unwrap() error {
	if e.gone != nil {
		return e.gone
	}
	return e.cause
}

// split divides err, a store method's error, into the caller's own
// context error (gone: return it) and the store's failure (cause: decide
// under the failure policy; nil when a breaker kept the call away).
func split(err error) (cause, gone error) {
	na, ok := errors.AsType[*noAnswer](err)
	switch {
	case !ok:
		return err, nil
	case na.gone != nil:
		return nil, na.gone
	}
	return na.cause, nil
}

// unanswered turns err, a store method's error for an operation what on
// key, into the caller's: nil, the caller's context error as is, or an
// error wrapping ErrUnavailable that says why.
func unanswered(err error, what, key string) error {
	na, ok := errors.AsType[*noAnswer](err)
	switch {
	case !ok:
		return err
	case na.gone != nil:
		return na.gone
	case na.cause == nil:
		return fmt.Errorf("%w: %s %q: %s", ErrUnavailable, what, key, na)
	}
	return fmt.Errorf("%w: %s %q: %w", ErrUnavailable, what, key, na.cause)
}

// memStore is the store of [NewMemory]: the limiter's own local store,
// with the limits in full. It is the same arithmetic as the local
// fallback of a Redis-backed limiter, which decides under a replica's
// share of each limit instead.
type memStore struct{ local *localStore }

func (m memStore) decide(_ context.Context, key string, p *plan, cost, maxWait, penalty, now int64) (decision, *noAnswer) {
	return m.local.take(p.id, key, now, p.ticks, cost, maxWait, penalty), nil
}

func (m memStore) peek(_ context.Context, key string, p *plan, now int64) (decision, *noAnswer) {
	return m.local.peek(p.id, key, now, p.ticks), nil
}

func (m memStore) decidePath(_ context.Context, q *pathAsk) (decision, int, error) {
	d, lv := m.local.takePath(q.ids, q.keys, q.now, q.levels, q.cost, 0, q.penalty)
	return d, lv, nil
}

func (m memStore) reset(_ context.Context, p *plan, key string) error {
	m.local.delete(p.id, key)
	return nil
}

// acquire takes a slot in the local store's counts, as the fallback
// does, under the cap in full.
func (m memStore) acquire(_ context.Context, a slotAsk) (slot, *lostSlot, error) {
	n, ok := m.local.slots().take(makeLocalKey(a.capID, a.key), a.max)
	return slot{acquired: ok, inFlight: n}, nil, nil
}

// errInMemory answers the calls that exist for Redis alone, which the
// engine never makes of a NewMemory limiter.
var errInMemory = errors.New("core: not a Redis-backed limiter")

func (memStore) renew(context.Context, []*renewal) {}

func (memStore) lease(context.Context, *leaseCall) (leaseAnswer, *noAnswer) {
	return leaseAnswer{}, &noAnswer{node: "memory", cause: errInMemory}
}

func (memStore) heartbeat(context.Context, string, string, time.Duration) (int64, error) {
	return 0, errInMemory
}

func (memStore) leaveFleet(context.Context, string, string) error { return errInMemory }

func (memStore) lend(log func() *slog.Logger, budget time.Duration) storeops.Store {
	return lent{log: log, budget: budget}
}

func (memStore) close() {}

func (m memStore) release(_ context.Context, r slotRef) error {
	m.local.slots().give(makeLocalKey(r.capID, r.key))
	return nil
}

// settle applies a settlement to the buckets in memory that decided it,
// with their limits in full, as the local fallback settles its own (see
// Reservation.settleIn). A reservation is settled once, so it is always
// applied.
func (m memStore) settle(_ context.Context, a settleAsk) (bool, error) {
	for i, p := range a.plans {
		m.local.settle(p.id, a.keys[i], a.now, a.at, p.ticks, a.delta)
	}
	return true, nil
}

func (memStore) inProcess() bool             { return true }
func (memStore) ready(context.Context) error { return nil }
func (memStore) ackMisses() int64            { return 0 }

// Ready reports whether the store can decide, for a Kubernetes readiness
// or start-up probe: nil when every node answered, let the limiter run
// scripts and keeps an eviction policy that cannot evict what the limiter
// must keep. Otherwise it returns an error wrapping [ErrUnavailable] that
// says the cause in words: nothing listens at the address (refused), no
// answer before ctx's deadline (timeout), authentication failed, the
// Redis user may not run scripts, or the eviction policy can lose limits.
//
// Ready also warms each node: it opens as many connections as the
// limiter keeps calls in flight to a node (see [WithBatching]) and loads
// the limiter's scripts, so that the first decisions after it pay neither
// connection handshakes nor EVAL's second round trip inside their budget. It asks every node (every
// master of a Cluster, every shard of a Ring); it is bounded by ctx alone,
// not by the limiter's budget, and sends its calls whatever the breakers
// say. For a limiter made by [NewMemory] it returns nil.
//
// Ready is safe for concurrent use; probes may call it as often as they
// like (it costs a few round trips per node).
func (l *Limiter) Ready(ctx context.Context) error { return l.store.ready(ctx) }

// ReplicaAckMisses returns how many decisions, since the limiter was made,
// Redis made in calls that did not get the acknowledgement [WithReplicaAck]
// asks for: fewer replicas acknowledged within the timeout, the reply to
// the wait was lost, or the call was sent without a wait (while replicas
// fall short, after a Cluster redirect, or on a client the limiter cannot
// wait on). Each of those decisions stands, and a failover may lose its
// write. Denials and peeks in such calls are counted too, though they
// wrote nothing (without a penalty lock). It returns 0 without
// WithReplicaAck, and for a limiter made by [NewMemory]. It is safe for
// concurrent use.
func (l *Limiter) ReplicaAckMisses() int64 { return l.store.ackMisses() }

// The limiter lends package overrides its store's road to Redis through
// internal/storeops: the set's scripts stay with the store's others, and
// are sent as operations of kind OpOverrides.
func init() {
	storeops.Of = func(lim any) storeops.Store {
		if l, ok := lim.(*Limiter); ok && l != nil {
			return l.store.lend(l.log, l.timeout)
		}
		return nil
	}
}

// The records the engine and the store exchange: plain values, never the
// engine's own types (see docs/architecture.md, Layers).

// slotAsk is a concurrency slot asked of a store: one of key's, under a
// cap of max slots named fp in Redis and capID in local memory, each held
// for lease unless renewed.
type slotAsk struct {
	fp    string
	capID uint64
	key   string
	max   int
	lease time.Duration
}

// slot is a store's answer to a slotAsk: whether the slot was taken, how
// many of the key's are held after it, and, in Redis, the slot's names.
type slot struct {
	acquired bool
	inFlight int
	rkey, id string // the key's lease set and the slot's member; "" in memory
}

// slotRef names a slot a store gave, to give it back: in memory by its
// cap and key, in Redis by its lease set and member.
type slotRef struct {
	capID    uint64
	key      string
	rkey, id string
	lease    time.Duration
}

// lostSlot is a slot Redis may hold though nobody heard it was given (see
// store.acquire): the lease keeper gives it back.
type lostSlot struct{ rkey, id string }

// settleAsk is a reservation's settlement asked of a store: the buckets
// that decided it (a key's one, or a path's levels, root first, whose
// stored names take the root's hash tag), the id that names its markers
// in Redis, the difference to apply (final less reserved, in events),
// how long Redis keeps the markers, and the limiter's clock, now and when
// the reservation was made (at: a stepped limit is settled in its window).
type settleAsk struct {
	plans  []*plan
	keys   []string
	path   bool
	id     string
	delta  int64
	marker time.Duration
	now    int64
	at     int64
}

// pathAsk is a path's decision as the engine asks it of the store.
type pathAsk struct {
	names   []string      // each level's name, for the log
	plans   []*plan       // each level's, root first
	keys    []string      // each level's key (see pathKeyOf)
	ids     []uint64      // each level's plan id
	levels  [][]tickLimit // each level's limits
	cost    int64
	penalty int64 // microseconds
	now     int64
}
