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
	acquire(ctx context.Context, c *Concurrency, key string) (ls *Lease, lost *orphan, err error)
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
	// release gives back ls, a slot this store gave; ErrLeaseLost if it
	// had expired.
	release(ctx context.Context, ls *Lease) error
	// reserved readies rv, a reservation this store admitted, for its
	// settlement.
	reserved(rv *Reservation)
	// settle applies final, the final cost of rv, a reservation this
	// store admitted, and reports whether it was applied (false: it had
	// been already). marker is how long Redis keeps rv's marker.
	settle(ctx context.Context, rv *Reservation, final int64, marker time.Duration) (bool, error)
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
	d, lv := m.local.takePath(q.ids, q.pd.keys, q.now, q.levels, q.cost, 0, q.penalty)
	return d, lv, nil
}

func (m memStore) reset(_ context.Context, p *plan, key string) error {
	m.local.delete(p.id, key)
	return nil
}

// acquire takes a slot in the local store's counts, as the fallback
// does, under the cap in full.
func (m memStore) acquire(_ context.Context, c *Concurrency, key string) (*Lease, *orphan, error) {
	ls := c.acquireLocal(key, c.limit.Max, false)
	ls.local = false // the store's slot: released by the store
	return ls, nil, nil
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

func (m memStore) release(_ context.Context, ls *Lease) error {
	m.local.slots().give(makeLocalKey(ls.c.id, ls.key))
	return nil
}

// reserved settles rv in the buckets that decided it, with its limits in
// full.
func (m memStore) reserved(rv *Reservation) {
	rv.via, rv.held = settleStore, rv.n
	if ps := rv.path; ps != nil {
		for _, p := range ps.plans {
			ps.ticks = append(ps.ticks, p.ticks)
		}
		return
	}
	rv.ticks = rv.p.ticks
}

// settle applies final to rv in memory, as the local fallback settles
// its own (see Reservation.settleIn). A reservation is settled once, so
// it is always applied.
func (m memStore) settle(_ context.Context, rv *Reservation, final int64, _ time.Duration) (bool, error) {
	rv.settleIn(m.local, rv.lim.now(), final)
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
