package core

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Fleet makes the local fallback share every limit among the live instances
// of a fleet (see [WithFleet]).
type Fleet struct {
	// Name identifies the fleet: limiters with the same Name and key
	// prefix count each other. Give each service its own. 1 to 64
	// bytes, no braces.
	Name string
	// Heartbeat is how often each instance announces itself in Redis. An
	// instance is counted until three heartbeats pass without one from
	// it. Default 1s; from 100ms to 1m.
	Heartbeat time.Duration
}

// WithFleet makes the local fallback divide each limit by the number of
// live instances of the fleet, learnt from Redis while it answers, instead
// of a replica count fixed at deploy time: a deployment scaled from 3 to 12
// replicas keeps about one limit's worth of admissions during an outage
// without a redeploy.
//
// Each limiter (one per process and fleet: two limiters of one process
// count as two instances) runs one goroutine that, every Heartbeat, adds
// itself to a sorted set in Redis (<prefix>{fleet:<Name>}), drops members
// silent for three heartbeats and reads how many remain: one script call,
// never on the request path. [Limiter.Close] stops it and removes the
// instance at once. While Redis is unreachable the last count stands.
// [WithFallbackReplicas] sets a floor: the divisor is never below it
// (default 1). An instance that has not counted its fleet yet (Redis has
// been unreachable since it started) divides by that floor if it was
// set, or else by [UnmetFleet]: a stated share, not the whole limit on
// each replica.
//
// WithFleet applies to the [FallbackLocal] policy and cannot be combined
// with [WithFallbackLimit]; [New] returns an error naming the conflict.
// [Limiter.FleetSize] reports the current count.
//
// Default: the implicit fleet, when nothing else sizes the fallback (no
// WithFleet, [WithFallbackReplicas] or [WithFallbackLimit], under
// FallbackLocal): every limiter on the same Redis and key prefix, in the
// set <prefix>{fleet:default}. It runs no goroutine: a decision that finds
// a heartbeat (1s) passed since the last announces the instance, one more
// script call a second per replica, so an instance without traffic stops
// being counted after three seconds. Several services on one Redis and
// prefix count as one fleet, which errs toward smaller shares. Until an
// instance's first heartbeat reaches Redis it cannot know the fleet: its
// fallback divides every limit by [UnmetFleet], and the outage's log line
// says so.
func WithFleet(f Fleet) Option {
	return func(o *options) {
		o.fleet = f
		if o.fleet.Heartbeat == 0 {
			o.fleet.Heartbeat = time.Second
		}
	}
}

func (o *options) validateFleet() error {
	f := o.fleet
	switch {
	case f.Name == "" && f.Heartbeat == 0:
		return nil
	case f.Name == "" || len(f.Name) > 64:
		return fmt.Errorf("core: WithFleet: Name is %d bytes, want 1 to 64", len(f.Name))
	case strings.ContainsAny(f.Name, "{}"):
		return fmt.Errorf("core: WithFleet: Name %q contains a brace; the library owns the hash tag", f.Name)
	case f.Heartbeat < 100*time.Millisecond || f.Heartbeat > time.Minute:
		return fmt.Errorf("core: WithFleet: Heartbeat is %s, want 100ms to 1m", f.Heartbeat)
	case o.policy != FallbackLocal:
		return fmt.Errorf("core: WithFleet sizes the local fallback, but the failure policy is %s", o.policy)
	case o.fallback != nil:
		return fmt.Errorf("core: WithFleet cannot be combined with WithFallbackLimit, which sets the fallback's limits itself")
	}
	return nil
}

// UnmetFleet is the divisor of the local fallback's limits on an instance
// that has not yet counted its fleet (see [WithFleet]; the implicit fleet
// by default): Redis has been unreachable since it started, so it cannot
// know how many replicas share each limit, and enforces a quarter of each
// rather than the whole: N such replicas admit N/4 of a limit's worth
// instead of N. [WithFallbackReplicas] replaces it with the count given.
const UnmetFleet = 4

// fleet is one limiter's membership: its heartbeat goroutine and what it
// last learnt.
type fleet struct {
	store    store  // the limiter's: heartbeats and leaving are store operations
	name, id string // the fleet's Name, and this member's id
	every    time.Duration
	floor    int          // the divisor's floor (WithFallbackReplicas)
	unmet    int          // the divisor before the first count: the floor if set, else UnmetFleet
	live     atomic.Int64 // members counted at the last heartbeat; 0 before the first

	// Used by the heartbeat goroutine only.
	lastOK time.Time // the last heartbeat that reached Redis
	backAt time.Time // the first one after a gap: the set is filling up again

	stop     context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once

	// The implicit fleet (see implicitFleet) has no goroutine: decisions
	// beat, at most one at a time and once per heartbeat.
	implicit bool
	beatAt   atomic.Int64 // the limiter's clock (microseconds) at the last beat begun
	everyUS  int64        // every, in microseconds
	beating  atomic.Bool
	closed   atomic.Bool
}

// implicitFleet is the fleet a limiter joins when nothing sizes its
// fallback (no WithFleet, WithFallbackReplicas or WithFallbackLimit, under
// FallbackLocal): every limiter with the same key prefix, which errs
// toward smaller shares when several services share one Redis and prefix.
var implicitFleet = Fleet{Name: "default", Heartbeat: time.Second}

// newImplicitFleet returns the implicit fleet's membership, which starts
// no goroutine: see maybeBeat.
func newImplicitFleet(st store) *fleet {
	f := newFleetState(st, implicitFleet, 1, UnmetFleet)
	f.implicit = true
	f.stop = func() {}
	close(f.done)
	return f
}

// maybeBeat starts a beat of the implicit fleet, by run (the limiter's
// background runner, which Close stops), when a heartbeat has passed since
// the last beat and no other is under way: one more script call a
// heartbeat, pipelined with decisions by the node's batcher, and a replica
// without traffic stops being counted after three. The decision that
// found it due does not wait for it: the beat has its own budget (a
// heartbeat), so a slow node costs no request its time, and a busy
// process's late beat is not a decision's failure. now is the limiter's
// clock (the decision's own instant: no clock is read here).
func (f *fleet) maybeBeat(now int64, run func(func(context.Context)) bool) {
	last := f.beatAt.Load()
	if now-last < f.everyUS || f.closed.Load() || !f.beating.CompareAndSwap(false, true) {
		return
	}
	if !f.beatAt.CompareAndSwap(last, now) {
		f.beating.Store(false)
		return
	}
	if !run(func(ctx context.Context) {
		defer f.beating.Store(false)
		f.beat(ctx)
	}) {
		f.beating.Store(false)
	}
}

func newFleet(st store, f Fleet, floor, unmet int) *fleet {
	fl := newFleetState(st, f, floor, unmet)
	ctx, cancel := context.WithCancel(context.Background())
	fl.stop = cancel
	go fl.run(ctx)
	return fl
}

// newFleetState returns a fleet membership with nothing running.
func newFleetState(st store, f Fleet, floor, unmet int) *fleet {
	return &fleet{
		store:   st,
		name:    f.Name,
		id:      newID(),
		every:   f.Heartbeat,
		everyUS: f.Heartbeat.Microseconds(),
		floor:   floor,
		unmet:   max(floor, unmet),
		done:    make(chan struct{}),
	}
}

// run beats at once, then every heartbeat, until ctx ends.
func (f *fleet) run(ctx context.Context) {
	defer close(f.done)
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		f.beat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beat announces the member and learns the fleet's size. A failure keeps
// the last size: that is what the fallback needs while Redis is away.
//
// After a gap (Redis was away long enough for every member's entry to
// expire, or restarted empty) the members come back one heartbeat at a
// time, and the first to return would count itself alone and take the
// whole limit while the others may still be deciding locally. So for three
// heartbeats after a gap the count may rise but not fall.
func (f *fleet) beat(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, f.every)
	defer cancel()
	n, err := f.store.Heartbeat(ctx, f.name, f.id, 3*f.every)
	if err != nil || n <= 0 {
		return
	}
	now := time.Now()
	if now.Sub(f.lastOK) > 2*f.every {
		f.backAt = now
	}
	f.lastOK = now
	if now.Sub(f.backAt) < 3*f.every && n < f.live.Load() {
		return // still refilling: keep the larger count
	}
	f.live.Store(n)
}

// size is the fleet's last known size, never below the floor (see
// Limiter.FleetSize).
func (f *fleet) size() int {
	n := f.live.Load()
	if n > math.MaxInt32 {
		n = math.MaxInt32
	}
	return max(int(n), f.floor)
}

// divisor is the divisor of the fallback's limits: the fleet's size, or
// before the first count, unmet (see UnmetFleet).
func (f *fleet) divisor() int {
	if f.live.Load() == 0 {
		return f.unmet
	}
	return f.size()
}

// close stops the heartbeat and removes the member, within timeout.
func (f *fleet) close(timeout time.Duration) error {
	var err error
	f.stopOnce.Do(func() {
		f.closed.Store(true)
		f.stop()
		<-f.done
		if f.implicit && f.beatAt.Load() == 0 {
			return // never announced
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		err = f.store.LeaveFleet(ctx, f.name, f.id)
	})
	return err
}

// FleetSize returns the number of live instances the limiter last counted
// in its fleet (see [WithFleet]), never below the floor set by
// [WithFallbackReplicas]; 0 without a fleet.
func (l *Limiter) FleetSize() int {
	if l.fleet == nil {
		return 0
	}
	return l.fleet.size()
}

// Close stops what the limiter runs in the background (the fleet
// heartbeat of [WithFleet], the renewal of concurrency leases, the
// flushes of [WithTopTalkers], after a last one within the limiter's
// budget or 100ms) and removes
// this instance from its fleet, so that the others count it out at once.
// The limiter still decides after Close, with the fleet's size as last
// counted; leases still held are no longer renewed, so their slots expire
// within their lease, and background warm-ups of connection pools stop
// (see [Limiter.Ready]). Close is safe to call more
// than once and on a limiter without a fleet; the Redis client stays the
// caller's to close, after Close.
func (l *Limiter) Close() error {
	l.keeper().close()
	l.bg.Stop()
	l.hotLeases().close()
	l.store.Close()
	if l.fleet == nil {
		return nil
	}
	return l.fleet.close(max(l.timeout, 100*time.Millisecond))
}

// share returns the local fallback's limits for plan p: fixed, or for the
// fleet's current size.
func (l *Limiter) share(p *plan) *share {
	if l.fleet == nil {
		return &p.local
	}
	n := l.fleet.divisor()
	if s := p.fleetShare.Load(); s != nil && s.n == n {
		return s
	}
	s, coarse, err := newShare(p.limits, p.Ticks, shareOf(n))
	if err != nil {
		return &p.local // cannot happen: p's own limits compile
	}
	s.n = n
	if len(coarse) > 0 {
		l.warnCoarse(coarse)
	}
	p.fleetShare.Store(s)
	return s
}
