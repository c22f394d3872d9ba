package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/core/internal/model"
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
	// Decide decides a request of cost on key under p at now (the
	// limiter's clock): a decision, or a reservation that may wait up to
	// maxWait; a denial locks the key for penalty (microseconds).
	//
	// It is NewMemory's hot path, so its arguments and results are what
	// fits in registers: a call struct passed by value, or an error
	// interface beside the decision, are copied through memory instead,
	// which cost BenchmarkMemoryAllow 7% (20 ns). (The decision is not
	// returned through a pointer as the engine's own layers pass it: a
	// pointer given to an interface's method escapes, and would cost
	// every decision an allocation.)
	Decide(ctx context.Context, key string, p *model.Plan, cost, maxWait, penalty, now int64) (decision, *noAnswer)
	// Peek decides a request of cost 0 on key at now, writing nothing.
	Peek(ctx context.Context, key string, p *model.Plan, now int64) (decision, *noAnswer)
	// PeekMany decides a request of cost 0 on each bucket of b, writing
	// nothing, in one round trip per node: one decision per bucket, in
	// order. A bucket the store could not read fails the whole call.
	PeekMany(ctx context.Context, b *buckets) ([]decision, error)
	// ResetMany deletes the state of each bucket of b, a path's levels.
	ResetMany(ctx context.Context, b *buckets) error
	// InFlight counts the slots of a.Key held under a's cap, writing
	// nothing; leases that expired are not counted.
	InFlight(ctx context.Context, a slotAsk) (int, error)
	// DecidePath decides a path of keys as one (see PathRule), and
	// returns the level its decision is about.
	DecidePath(ctx context.Context, q *pathAsk) (decision, int, error)
	// Reset deletes key's state under p.
	Reset(ctx context.Context, p *model.Plan, key string) error
	// Lock locks key's bucket under p for d microseconds from now (a
	// lock that ends later stays) and returns how long its lock lasts.
	Lock(ctx context.Context, p *model.Plan, key string, d, now int64) (int64, error)
	// Acquire takes a slot of key under c's cap, or reports it full. A
	// slot the store may hold though nobody heard it was given comes
	// back as lost, for the lease keeper to give back.
	Acquire(ctx context.Context, a slotAsk) (sl slot, lost *lostSlot, err error)
	// Renew sends a round of the lease keeper's renewals and give backs,
	// setting each one's outcome.
	Renew(ctx context.Context, round []*renewal)
	// Lease takes or gives back a token Lease (see hotlease.go).
	Lease(ctx context.Context, lc *leaseCall) (leaseAnswer, *noAnswer)
	// Heartbeat announces member id of fleet and returns how many members
	// are live (see WithFleet); leaveFleet removes it.
	Heartbeat(ctx context.Context, fleet, id string, ttl time.Duration) (int64, error)
	LeaveFleet(ctx context.Context, fleet, id string) error
	// FlushTop adds top-talkers sketches' counts to their windows;
	// ReadTop reads a limit's windows, writing nothing (see top.go).
	FlushTop(ctx context.Context, fl []model.TopFlush) error
	ReadTop(ctx context.Context, limit string, windows []int64) ([]model.TopWindow, error)
	// Lend returns what the store lends package overrides (see
	// core/internal/redisstore/lend.go); budget is the limiter's.
	Lend(log func() *slog.Logger, budget time.Duration) storeops.Store
	// Close stops the store's background tasks and waits for them.
	Close()
	// Release gives back r, a slot this store gave; ErrLeaseLost if it
	// had expired.
	Release(ctx context.Context, r slotRef) error
	// Settle applies a settlement of a reservation this store admitted,
	// and reports whether it was applied (false: it had been already).
	Settle(ctx context.Context, a settleAsk) (bool, error)
	// Warn sets the warning marker of key under limit index of p for
	// window microseconds, if it is not set (see Rule.WithWarning):
	// first reports that this call set it; otherwise left is how long
	// the marker set before still holds.
	Warn(ctx context.Context, key string, p *model.Plan, index int, window, now int64) (first bool, left int64, err error)
	// InProcess reports whether every decision is made in this
	// process's memory: there are no round trips to save (token leases
	// change nothing) and nothing to fail.
	InProcess() bool
	// Ready reports whether the store can answer (see Limiter.Ready).
	Ready(ctx context.Context) error
	// AckMisses counts the calls whose writes replicas did not
	// acknowledge (see Limiter.ReplicaAckMisses).
	AckMisses() int64
}

// split divides err, a store method's error, into the caller's own
// context error (gone: return it) and the store's failure (cause: decide
// under the failure policy; nil when a breaker kept the call away).
func split(err error) (cause, gone error) {
	na, ok := errors.AsType[*noAnswer](err)
	switch {
	case !ok:
		return err, nil
	case na.Gone != nil:
		return nil, na.Gone
	}
	return na.Cause, nil
}

// unanswered turns err, a store method's error for an operation what on
// key, into the caller's: nil, the caller's context error as is, or an
// error wrapping ErrUnavailable that says why.
func unanswered(err error, what, key string) error {
	na, ok := errors.AsType[*noAnswer](err)
	switch {
	case !ok:
		return err
	case na.Gone != nil:
		return na.Gone
	case na.Cause == nil:
		return fmt.Errorf("%w: %s %q: %s", ErrUnavailable, what, key, na)
	}
	return fmt.Errorf("%w: %s %q: %w", ErrUnavailable, what, key, na.Cause)
}

// memStore is the store of [NewMemory]: the limiter's own local store,
// with the limits in full. It is the same arithmetic as the local
// fallback of a Redis-backed limiter, which decides under a replica's
// share of each limit instead.
type memStore struct {
	local *localStore
	top   *memTop // the windows of top talkers (see WithTopTalkers)
}

func (m memStore) Decide(_ context.Context, key string, p *model.Plan, cost, maxWait, penalty, now int64) (decision, *noAnswer) {
	d := m.local.take(p.ID, key, now, p.Ticks, cost, maxWait, penalty)
	d.At = now // this store's clock is the limiter's
	if p.Shadow != nil {
		m.local.memShadows(&d, p.Shadow, key, now, cost, maxWait)
	}
	return d, nil
}

func (m memStore) Peek(_ context.Context, key string, p *model.Plan, now int64) (decision, *noAnswer) {
	d := m.local.peek(p.ID, key, now, p.Ticks)
	d.At = now
	return d, nil
}

func (m memStore) PeekMany(_ context.Context, b *buckets) ([]decision, error) {
	ds := make([]decision, len(b.Keys))
	for i, key := range b.Keys {
		ds[i] = m.local.peek(b.Plans[i].ID, key, b.Now, b.Plans[i].Ticks)
		ds[i].At = b.Now
	}
	return ds, nil
}

func (m memStore) ResetMany(_ context.Context, b *buckets) error {
	for i, key := range b.Keys {
		m.local.delete(b.Plans[i].ID, key)
	}
	return nil
}

// InFlight counts the slots taken in the local store's counts, which
// NewMemory's leases hold until they are released.
func (m memStore) InFlight(_ context.Context, a slotAsk) (int, error) {
	return m.local.slots().held(makeLocalKey(a.CapID, a.Key)), nil
}

func (m memStore) DecidePath(_ context.Context, q *pathAsk) (decision, int, error) {
	d, lv := m.local.takePath(q, q.Cost)
	d.At = q.Now
	return d, lv, nil
}

func (m memStore) Reset(_ context.Context, p *model.Plan, key string) error {
	m.local.delete(p.ID, key)
	return nil
}

func (m memStore) Lock(_ context.Context, p *model.Plan, key string, d, now int64) (int64, error) {
	return m.local.lock(p.ID, key, now, p.Ticks, now+d) - now, nil
}

// Acquire takes a slot in the local store's counts, as the fallback
// does, under the cap in full.
func (m memStore) Acquire(_ context.Context, a slotAsk) (slot, *lostSlot, error) {
	n, ok := m.local.slots().take(makeLocalKey(a.CapID, a.Key), a.Max)
	return slot{Acquired: ok, InFlight: n}, nil, nil
}

func (memStore) Renew(context.Context, []*renewal) {}

func (memStore) Lease(context.Context, *leaseCall) (leaseAnswer, *noAnswer) {
	return leaseAnswer{}, &noAnswer{Node: "memory", Cause: errInMemory}
}

func (memStore) Heartbeat(context.Context, string, string, time.Duration) (int64, error) {
	return 0, errInMemory
}

func (memStore) LeaveFleet(context.Context, string, string) error { return errInMemory }

func (memStore) Lend(log func() *slog.Logger, budget time.Duration) storeops.Store {
	return memLent{log: log, budget: budget}
}

// memLent is a NewMemory limiter as package overrides sees it: its sets
// live in process memory, and no script is ever run.
type memLent struct {
	log    func() *slog.Logger
	budget time.Duration
}

func (memLent) Memory() bool            { return true }
func (s memLent) Logger() *slog.Logger  { return s.log() }
func (s memLent) Budget() time.Duration { return s.budget }

func (memLent) SetOverride(context.Context, string, string, string, int) (int64, error) {
	return 0, errInMemory
}

func (memLent) RemoveOverride(context.Context, string, string) (int64, error) {
	return 0, errInMemory
}

func (memLent) LoadOverrides(context.Context, string, string, int) ([]any, error) {
	return nil, errInMemory
}

func (memStore) Close() {}

func (m memStore) Release(_ context.Context, r slotRef) error {
	m.local.slots().give(makeLocalKey(r.CapID, r.Key))
	return nil
}

// Settle applies a settlement to the buckets in memory that decided it,
// with their limits in full, as the local fallback settles its own (see
// Reservation.settleIn). A reservation is settled once, so it is always
// applied.
func (m memStore) Settle(_ context.Context, a settleAsk) (bool, error) {
	for i, p := range a.Plans {
		m.local.settle(p.ID, a.Keys[i], a.Now, a.At, p.Ticks, a.Delta)
	}
	return true, nil
}

func (memStore) InProcess() bool { return true }

// Warn is first for every crossing: the engine's memory of the markers
// it set (see thresholds) is the marker of a process's own store.
func (memStore) Warn(context.Context, string, *model.Plan, int, int64, int64) (bool, int64, error) {
	return true, 0, nil
}

func (memStore) Ready(context.Context) error { return nil }
func (memStore) AckMisses() int64            { return 0 }

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
// It logs once per node that keeps no append-only file (appendonly no):
// the node is ready, but a restart then costs calendar and interval quotas
// what living replicas cannot re-assert of the current window (see
// docs/topologies.md, "Quotas across a loss").
//
// Ready is safe for concurrent use; probes may call it as often as they
// like (it costs a few round trips per node).
func (l *Limiter) Ready(ctx context.Context) error { return l.store.Ready(ctx) }

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
func (l *Limiter) ReplicaAckMisses() int64 { return l.store.AckMisses() }

// The limiter lends package overrides its store's road to Redis through
// internal/storeops: the set's scripts stay with the store's others, and
// are sent as operations of kind OpOverrides.
func init() {
	storeops.Of = func(lim any) storeops.Store {
		if l, ok := lim.(*Limiter); ok && l != nil {
			return l.store.Lend(l.log, l.timeout)
		}
		return nil
	}
}

// The records the engine and the store exchange: plain values, never the
// engine's own types (see docs/architecture.md, Layers).
