package core

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ConcurrencyLimit caps the requests in flight per key: at most Max hold a
// slot at once, across every replica sharing the Redis.
type ConcurrencyLimit struct {
	// Name labels the cap, as Limit.Name does a rate; caps with different
	// names (or maxima) keep apart slots.
	Name string
	// Max is how many requests may hold a slot at once, 1 to 1,000,000.
	Max int
	// Lease is how long a slot outlives its holder's last renewal. A
	// holder renews its slots every Lease/3 while it runs, so a slow but
	// live request keeps its slot, and the slots of a process that died
	// (SIGKILL, a lost node) are free again within Lease. From 300ms to
	// 10m; zero means 10s.
	Lease time.Duration
}

const defaultLease = 10 * time.Second

func (c ConcurrencyLimit) validate() error {
	switch {
	case c.Max < 1 || c.Max > 1_000_000:
		return fmt.Errorf("%w: concurrency Max %d, want 1 to 1000000", ErrInvalidLimit, c.Max)
	case c.Lease != 0 && (c.Lease < 300*time.Millisecond || c.Lease > 10*time.Minute):
		return fmt.Errorf("%w: concurrency Lease %s, want 300ms to 10m (or 0 for 10s)", ErrInvalidLimit, c.Lease)
	}
	return nil
}

// Concurrency is a [ConcurrencyLimit] bound to the limiter that prepared
// it (see [Limiter.PrepareConcurrency]). It is safe for concurrent use.
type Concurrency struct {
	lim   *Limiter
	limit ConcurrencyLimit
	fp    string // part of each key's Redis key, as a plan's fingerprint
	id    uint64 // the cap's name in local memory
	lease time.Duration
}

// PrepareConcurrency validates c and returns the cap it describes, in the
// limiter's scope-less key space: its keys are apart from every rate
// limit's. It returns an error wrapping [ErrInvalidLimit] for an invalid
// cap.
//
// Slots live in Redis as one sorted set per key (members are leases,
// scored by their expiry on Redis's clock), taken and given back by
// scripts, so the cap is exact across replicas. While Redis is
// unavailable, [Concurrency.Acquire] follows the limiter's failure policy:
// under FallbackLocal each replica holds at most its share of Max
// (Max divided by the replicas of [WithFallbackReplicas] or the fleet of
// [WithFleet], at least 1) in memory.
func (l *Limiter) PrepareConcurrency(c ConcurrencyLimit) (*Concurrency, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	lease := c.Lease
	if lease == 0 {
		lease = defaultLease
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "concurrency %d %q", c.Max, c.Name))
	return &Concurrency{
		lim:   l,
		limit: c,
		fp:    "c" + hex.EncodeToString(sum[:6]),
		id:    binary.LittleEndian.Uint64(sum[8:16]),
		lease: lease,
	}, nil
}

// Limit returns the cap.
func (c *Concurrency) Limit() ConcurrencyLimit { return c.limit }

// Lease is a slot taken by [Concurrency.Acquire], or the refusal of one.
// Release it when the request ends, also on panic; releasing is
// idempotent. While it is held, the limiter renews it in Redis.
type Lease struct {
	// Acquired reports whether a slot was taken. A refused lease has
	// nothing to release.
	Acquired bool
	// InFlight is how many slots of the key were held after this
	// acquisition (including this one's), or, when refused, at the time.
	InFlight int
	// Degraded reports that the store was unavailable and the lease was
	// decided under the failure policy.
	Degraded bool

	c      *Concurrency
	key    string
	rkey   string // the Redis key; "" for a lease held only locally
	id     string // the member in the sorted set
	local  bool   // held by the local fallback, not by the store
	once   sync.Once
	expiry time.Time // when Redis drops the slot if it is not renewed; guarded by the keeper
}

// Acquire takes a slot of key, or reports that the key has Max requests in
// flight (Acquired false: a normal outcome, not an error). It returns an
// error for an empty key, the caller's context error, and, wrapping
// [ErrUnavailable], when the store is unavailable under FailClosed.
func (c *Concurrency) Acquire(ctx context.Context, key string) (*Lease, error) {
	ls, err := c.acquire(ctx, key)
	if cobs, ok := c.lim.obs.(ConcurrencyObserver); ok && ls != nil {
		src := SourceStore
		switch {
		case ls.Degraded && ls.c == nil:
			src = SourceFailOpen
		case ls.Degraded:
			src = SourceFallback
		}
		cobs.ObserveAcquire(c.limit, ls.Acquired, src)
	}
	return ls, err
}

// acquire is Acquire before it is observed.
func (c *Concurrency) acquire(ctx context.Context, key string) (*Lease, error) {
	if key == "" {
		return nil, errEmptyKey
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := c.lim
	sl, lost, err := l.store.Acquire(ctx, slotAsk{FP: c.fp, CapID: c.id, Key: key, Max: c.limit.Max, Lease: c.lease})
	if lost != nil {
		l.keeper().giveBack(orphan{c: c, rkey: lost.RKey, id: lost.ID, until: time.Now().Add(c.lease)})
	}
	if err == nil {
		ls := &Lease{Acquired: sl.Acquired, InFlight: sl.InFlight, c: c, key: key, rkey: sl.RKey, id: sl.ID}
		if ls.rkey != "" {
			l.keeper().add(ls, time.Now().Add(c.lease))
		}
		return ls, nil
	}
	cause, gone := split(err)
	if gone != nil {
		return nil, gone // the caller gave up
	}
	switch open, err := l.unavailable(cause, false, false); {
	case err != nil:
		return nil, err
	case open:
		return &Lease{Acquired: true, Degraded: true}, nil
	}
	return c.acquireLocal(key), nil
}

// InFlight returns how many slots of key are held now, writing nothing:
// in Redis the leases of every replica that have not expired on Redis's
// clock (a lease whose holder died stops counting within its Lease), in
// a [NewMemory] limiter the slots taken and not released. Slots that the
// local fallback took while Redis was down are not counted: they were
// never Redis's. During a key's grace period after a restart (see
// docs/topologies.md, "What Redis forgets") it counts the leases
// re-asserted so far.
//
// InFlight never degrades: when the store cannot answer (or its breaker
// is open) it returns an error wrapping [ErrUnavailable], also when the
// key's stored value is of another type. It returns an error for an
// empty key, and the caller's context error.
func (c *Concurrency) InFlight(ctx context.Context, key string) (int, error) {
	if key == "" {
		return 0, errEmptyKey
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.lim.store.InFlight(ctx, slotAsk{FP: c.fp, CapID: c.id, Key: key, Max: c.limit.Max, Lease: c.lease})
	if err != nil {
		return 0, unanswered(err, "in-flight count", key)
	}
	return n, nil
}

// localShare is this replica's share of Max while the store is down.
func (c *Concurrency) localShare() int {
	n := c.lim.replicas
	if c.lim.fleet != nil {
		n = c.lim.fleet.size()
	}
	return max(1, c.limit.Max/max(1, n))
}

// acquireLocal takes a slot of key in the process's own counts, under
// this replica's share of Max, while the store is unavailable.
func (c *Concurrency) acquireLocal(key string) *Lease {
	n, ok := c.lim.local.slots().take(makeLocalKey(c.id, key), c.localShare())
	return &Lease{Acquired: ok, InFlight: n, Degraded: true, c: c, key: key, local: ok}
}

// Release gives the slot back. It is idempotent, and does nothing for a
// refused or fail-open lease. It returns [ErrLeaseLost] if the slot had
// expired in Redis before the release (renewals failed for longer than the
// lease), and, wrapping [ErrUnavailable], a store failure or an open
// breaker (the store is not asked): the slot then
// expires by itself within the lease.
func (ls *Lease) Release(ctx context.Context) error {
	if ls == nil || !ls.Acquired {
		return nil
	}
	var err error
	ls.once.Do(func() {
		c := ls.c
		if c == nil {
			return // fail open: nothing was counted
		}
		if cobs, ok := c.lim.obs.(ConcurrencyObserver); ok {
			cobs.ObserveRelease(c.limit)
		}
		if ls.local {
			c.lim.local.slots().give(makeLocalKey(c.id, ls.key))
			return
		}
		if ls.rkey != "" {
			c.lim.keeper().remove(ls)
		}
		err = c.lim.store.Release(ctx, slotRef{CapID: c.id, Key: ls.key, RKey: ls.rkey, ID: ls.id, Lease: c.lease})
		if na, ok := errors.AsType[*noAnswer](err); ok && na.Gone == nil && na.Cause == nil {
			err = fmt.Errorf("%w: release a slot of %q: %s; the slot expires within its lease", ErrUnavailable, ls.key, na)
			return
		}
		err = unanswered(err, "release a slot of", ls.key)
	})
	return err
}

// The slots of a key are a sorted set: each member a lease id, scored by
// the millisecond (on Redis's clock) at which it expires unless renewed.
// Every script first drops the expired ones and clamps any score beyond
// one lease. The set has no expiry (so volatile-* eviction cannot take
// it); it goes when its last member does. See leases.lua.
//
// What Redis forgets: a renewal re-asserts a lease Redis no longer holds,
// if the key has a free slot, so a holder reclaims its slot after a
// restart or a failover that lost writes; and for a lease after the
// limiter saw the node's server replace another (a restart, a failover) a
// key is in its grace period, in which only such re-assertions take
// slots, so newcomers cannot take the slots of holders the new server
// never heard of before those re-assert.

// leaseKeeper renews the limiter's leases held in Redis, every third of
// their lease, in one pipeline per round. It runs while leases are held:
// started by the first, stopped when none is left or by Close.
type leaseKeeper struct {
	l      *Limiter
	mu     sync.Mutex
	leases map[*Lease]struct{}
	lost   []orphan      // slots to give back in the next round
	stop   chan struct{} // closed by Close
	done   chan struct{} // closed when the loop has returned; nil: not running
	closed bool
}

// keeper returns the limiter's lease keeper, made on first use.
func (l *Limiter) keeper() *leaseKeeper {
	return l.keep.get(func() *leaseKeeper {
		return &leaseKeeper{l: l, leases: make(map[*Lease]struct{}), stop: make(chan struct{})}
	})
}

func (k *leaseKeeper) add(ls *Lease, expiry time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ls.expiry = expiry
	k.leases[ls] = struct{}{}
	k.startLocked()
}

// startLocked starts the loop unless it runs or the keeper is closed.
func (k *leaseKeeper) startLocked() {
	if k.done == nil && !k.closed {
		k.done = make(chan struct{})
		go k.loop(k.done)
	}
}

// orphan is a slot that Redis may hold for an acquisition whose caller
// never heard the answer (it outlived its budget, or the caller gave up
// after the script was sent). Nothing would release it: the keeper gives
// it back, trying each round until the slot would have expired anyway.
type orphan struct {
	c        *Concurrency
	rkey, id string
	until    time.Time
}

// maxOrphans bounds the slots waiting to be given back; past it, a slot
// expires by itself within its lease.
const maxOrphans = 4096

// giveBack asks the keeper to give back, in its next round, the slot that
// Redis may hold for o.
func (k *leaseKeeper) giveBack(o orphan) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || len(k.lost) >= maxOrphans {
		return
	}
	k.lost = append(k.lost, o)
	k.startLocked()
}

func (k *leaseKeeper) remove(ls *Lease) {
	k.mu.Lock()
	delete(k.leases, ls)
	k.mu.Unlock()
}

// loop renews the leases until none is left or the keeper is closed.
func (k *leaseKeeper) loop(done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(k.period())
	defer tick.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-tick.C:
		}
		k.mu.Lock()
		if len(k.leases) == 0 && len(k.lost) == 0 {
			k.done = nil
			k.mu.Unlock()
			return
		}
		due := make([]*Lease, 0, len(k.leases))
		for ls := range k.leases {
			due = append(due, ls)
		}
		lost := k.lost
		k.lost = nil
		k.mu.Unlock()
		k.renew(due, lost)
	}
}

// period is how often the keeper renews: a third of the shortest lease it
// may hold, so a lease survives two failed rounds.
func (k *leaseKeeper) period() time.Duration { return minLease / 3 }

// minLease is the shortest lease a ConcurrencyLimit may have.
const minLease = 300 * time.Millisecond

// renew renews leases whose next renewal is due (those with less than two
// thirds of their lease left) and gives back the lost slots; a slot whose
// release failed is tried again next round.
func (k *leaseKeeper) renew(leases []*Lease, lost []orphan) {
	l := k.l
	now := time.Now()
	k.mu.Lock()
	var due []*Lease
	for _, ls := range leases {
		if ls.expiry.Sub(now) <= 2*ls.c.lease/3 {
			due = append(due, ls)
		}
	}
	k.mu.Unlock()
	if len(due) == 0 && len(lost) == 0 {
		return
	}
	// No caller waits on a round, so it has a second (or the budget, if
	// longer): a restarted node must hear from its holders within its
	// grace period, and a round cut short by a pause of this process, or
	// by a fresh connection's handshake, would wait for the next. A
	// renewal that fails is tried again next round; a lease that has
	// expired is found out by its Release.
	ctx, cancel := context.WithTimeout(context.Background(), max(l.timeout, time.Second))
	defer cancel()
	round := make([]*renewal, 0, len(due)+len(lost))
	for _, ls := range due {
		round = append(round, &renewal{RKey: ls.rkey, ID: ls.id, Max: ls.c.limit.Max, Lease: ls.c.lease})
	}
	var gives []orphan
	for _, o := range lost {
		if now.Before(o.until) {
			gives = append(gives, o)
			round = append(round, &renewal{RKey: o.rkey, ID: o.id, Lease: o.c.lease, Give: true})
		}
	}
	l.store.Renew(ctx, round)
	var retry []orphan
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, r := range round {
		if r.Give {
			if !r.Sent || r.Err != nil && !r.KeyFault {
				retry = append(retry, gives[i-len(due)])
			}
			continue
		}
		if r.Err != nil || len(r.Vals) != 2 {
			continue // tried again next round
		}
		ls := due[i]
		switch r.Vals[0] {
		case 1:
			ls.expiry = now.Add(ls.c.lease)
		case 0:
			// Missing, and the key at its cap: re-asserting would
			// exceed it, so the lease is lost (its Release says so).
			delete(k.leases, ls)
		}
	}
	k.lost = append(k.lost, retry...)
}

// close stops the keeper and waits for its loop. Leases still held are no
// longer renewed: their slots expire within their lease.
func (k *leaseKeeper) close() {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.closed = true
	close(k.stop)
	done := k.done
	k.mu.Unlock()
	if done != nil {
		<-done
	}
}

// slotCounts are the local fallback's counts of slots in flight per key.
type slotCounts struct {
	mu sync.Mutex
	n  map[localKey]int
}

// take adds a slot of k unless most are held; it returns the count after.
func (s *slotCounts) take(k localKey, most int) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.n[k]
	if n >= most {
		return n, false
	}
	if k.key != digestedKey {
		k.key = strings.Clone(k.key)
	}
	s.n[k] = n + 1
	return n + 1, true
}

// held returns how many slots of k are held.
func (s *slotCounts) held(k localKey) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[k]
}

// give returns a slot of k.
func (s *slotCounts) give(k localKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch n := s.n[k]; {
	case n > 1:
		s.n[k] = n - 1
	default:
		delete(s.n, k)
	}
}
