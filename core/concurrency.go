package core

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/internal/batch"
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

// ErrLeaseLost is returned by [Lease.Release] when the lease's slot was
// gone before it was released: its renewals failed for longer than the
// lease (Redis was unreachable), or Redis forgot it (a restart, a failover
// that lost writes) and other requests had taken its slot by the time a
// renewal re-asserted it. Another request may have held the slot meanwhile,
// so the cap may have been exceeded.
var ErrLeaseLost = errors.New("core: the slot's lease expired before it was released")

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
	if ls != nil && c.lim.cobs != nil {
		src := SourceStore
		switch {
		case ls.Degraded && ls.c == nil:
			src = SourceFailOpen
		case ls.Degraded:
			src = SourceFallback
		}
		c.lim.cobs.ObserveAcquire(c.limit, ls.Acquired, src)
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
	ls, err := l.store.acquire(ctx, c, key)
	if err == nil {
		return ls, nil
	}
	storeErr, gone := split(err)
	if gone != nil {
		return nil, gone // the caller gave up
	}
	switch l.policy {
	case FailOpen:
		return &Lease{Acquired: true, Degraded: true}, nil
	case FailClosed:
		if storeErr == nil {
			storeErr = errors.New("circuit open after repeated store failures")
		}
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, storeErr)
	}
	return c.acquireLocal(key, c.localShare(), true), nil
}

// localShare is this replica's share of Max while the store is down.
func (c *Concurrency) localShare() int {
	n := c.lim.replicas
	if c.lim.fleet != nil {
		n = c.lim.fleet.size()
	}
	return max(1, c.limit.Max/max(1, n))
}

// acquireLocal takes a slot in the process's own counts, capped at most.
func (c *Concurrency) acquireLocal(key string, most int, degraded bool) *Lease {
	k := c.lim.local.slots()
	n, ok := k.take(makeLocalKey(c.id, key), most)
	ls := &Lease{Acquired: ok, InFlight: n, Degraded: degraded, c: c, key: key}
	ls.local = ok
	return ls
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
		if c.lim.cobs != nil {
			c.lim.cobs.ObserveRelease(c.limit)
		}
		if ls.local {
			c.lim.local.slots().give(makeLocalKey(c.id, ls.key))
			return
		}
		err = c.lim.store.release(ctx, ls)
		if na, ok := errors.AsType[*noAnswer](err); ok && na.gone == nil && na.cause == nil {
			err = fmt.Errorf("%w: release a slot of %q: %s; the slot expires within its lease", ErrUnavailable, ls.key, na)
			return
		}
		err = unanswered(err, "release a slot of", ls.key)
	})
	return err
}

// foreignLease logs, once per limiter, that the lease set rkey held a
// value of another type, which the script deleted (flag 1).
func (l *Limiter) foreignLease(rkey string, flag int64) {
	if flag != 1 || !l.keeper().foreignLogged.CompareAndSwap(false, true) {
		return
	}
	l.log().Warn("sluice: a concurrency cap's key held a value of another type; it was deleted and the cap counts from zero. Another program writes under the limiter's prefix (core.WithPrefix)",
		"key", rkey)
}

// newLeaseID returns 16 random hex digits: unique enough that two live
// leases of one key never share an id.
func newLeaseID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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

	foreignLogged atomic.Bool // a lease set of another type was logged

	srvMu   sync.Mutex
	servers map[*node]serverSeen // what the lease scripts saw of each node's server
}

// serverSeen is what a limiter knows of the server process behind a node:
// its LASTSAVE when last read (the second it started, or its last save),
// which process it is (from its run_id), its replication history (from
// master_replid: see history() in leases.lua), on a Cluster its node id,
// and, if the limiter saw it
// replace another, since when (ms on its clock): its start after a
// restart, or, for a server that had run longer than a lease (a failover
// to a replica, a restart that loaded a file), the moment the change was
// noticed. A key's lease set within a lease of then may lack holders the
// server never heard of (see acquire.lua).
type serverSeen struct{ lastsave, run, restart, replid, myid int64 }

// server returns what the keeper knows of nd's server.
func (k *leaseKeeper) server(nd *node) serverSeen {
	k.srvMu.Lock()
	defer k.srvMu.Unlock()
	return k.servers[nd]
}

// histories appends to args the replication histories of the servers the
// keeper knows on nodes other than nd: a server on nd whose previous
// history is one of them was promoted from that node's replica (a Cluster
// failover; see acquire.lua).
func (k *leaseKeeper) histories(nd *node, args []any) []any {
	k.srvMu.Lock()
	defer k.srvMu.Unlock()
	for other, s := range k.servers {
		if other != nd && s.replid != 0 {
			args = append(args, s.replid)
		}
	}
	return args
}

// saw records what a lease script or an INFO reply read of nd's server
// (zero fields: not read). With replaced, the server replaced one the
// limiter knew, since got.restart; a new process behind a known one
// replaced it since its start (the acquire script's verdict, which knows
// the lease, comes with replaced).
func (k *leaseKeeper) saw(nd *node, got serverSeen, replaced bool) {
	if got.lastsave == 0 && got.run == 0 {
		return
	}
	k.srvMu.Lock()
	defer k.srvMu.Unlock()
	if k.servers == nil {
		k.servers = make(map[*node]serverSeen)
	}
	s := k.servers[nd]
	if got.lastsave != 0 {
		s.lastsave = got.lastsave
	}
	if replaced || (got.run != 0 && s.run != 0 && got.run != s.run) {
		s.restart = got.restart
	}
	if got.run != 0 {
		s.run = got.run
	}
	if got.replid != 0 {
		s.replid = got.replid
	}
	if got.myid != 0 {
		s.myid = got.myid
	}
	k.servers[nd] = s
}

// seed records what an INFO reply of nd's server says of it, as the
// acquire script would have (see saw): its LASTSAVE (rdb_last_save_time),
// which process it is (run_id), and its replication history
// (master_replid).
func (k *leaseKeeper) seed(nd *node, info string) {
	save, _ := strconv.ParseInt(infoField(info, "rdb_last_save_time"), 10, 64)
	run := hexPrefix(infoField(info, "run_id"))
	up, _ := strconv.ParseInt(infoField(info, "uptime_in_seconds"), 10, 64)
	if run == 0 {
		return
	}
	k.saw(nd, serverSeen{lastsave: save, run: run, restart: time.Now().UnixMilli() - up*1000, replid: hexPrefix(infoField(info, "master_replid"))}, false)
}

// hexPrefix is the number of id's first 13 hex digits, as the lease
// scripts read run_id and master_replid (0 for none).
func hexPrefix(id string) int64 {
	n, _ := strconv.ParseInt(id[:min(13, len(id))], 16, 64)
	return n
}

// keeper returns the limiter's lease keeper, made on first use.
func (l *Limiter) keeper() *leaseKeeper {
	l.keepOnce.Do(func() {
		l.keep = &leaseKeeper{l: l, leases: make(map[*Lease]struct{}), stop: make(chan struct{})}
	})
	return l.keep
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

// orphan asks the keeper to give back, in its next round, the slot that
// Redis may hold for id in rkey.
func (k *leaseKeeper) orphan(c *Concurrency, rkey, id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || len(k.lost) >= maxOrphans {
		return
	}
	k.lost = append(k.lost, orphan{c: c, rkey: rkey, id: id, until: time.Now().Add(c.lease)})
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
	// by a fresh connection's handshake, would wait for the next.
	ctx, cancel := context.WithTimeout(context.Background(), max(l.timeout, time.Second))
	defer cancel()
	// One round per node, in one pipeline, on the road: sent even while
	// the node's breaker is open (see Limiter.aside), so a restarted node
	// hears from its holders within its grace period; a renewal that
	// fails is tried again next round; a lease that has expired is found
	// out by its Release.
	type round struct {
		leases []*Lease
		lost   []orphan
		key    string // a key of the node's, for the road
	}
	byNode := map[*node]*round{}
	var order []*node
	of := func(rkey string) *round {
		nd := l.redis.node(ctx, rkey)
		r, ok := byNode[nd]
		if !ok {
			r = &round{key: rkey}
			byNode[nd] = r
			order = append(order, nd)
		}
		return r
	}
	for _, ls := range due {
		r := of(ls.rkey)
		r.leases = append(r.leases, ls)
	}
	for _, o := range lost {
		if now.Before(o.until) {
			r := of(o.rkey)
			r.lost = append(r.lost, o)
		}
	}
	var retry []orphan
	for _, nd := range order {
		r := byNode[nd]
		ops := make([]*op, 0, len(r.leases)+len(r.lost))
		for _, ls := range r.leases {
			ops = append(ops, &op{script: renewScript, keys: []string{ls.rkey}, args: []any{ls.c.limit.Max, ls.c.lease.Milliseconds(), ls.id}})
		}
		for _, o := range r.lost {
			ops = append(ops, &op{script: releaseScript, keys: []string{o.rkey}, args: []any{o.c.lease.Milliseconds(), o.id}})
		}
		var replies []*batch.Member[*op, []int64]
		_, _ = l.onNode(ctx, nd, l.now(), OpRenew, r.key, func() (time.Duration, error) {
			start := time.Now()
			replies = l.redis.runOps(ctx, nd, ops)
			for _, m := range replies {
				if m.Err != nil && !keyFault(m.Err) {
					return time.Since(start), m.Err // the node's failure, charged once
				}
			}
			return time.Since(start), nil
		})
		k.mu.Lock()
		for i, m := range replies {
			if i >= len(r.leases) {
				if m.Err != nil && !keyFault(m.Err) {
					retry = append(retry, r.lost[i-len(r.leases)])
				}
				continue
			}
			if m.Err != nil || len(m.Res) != 2 {
				continue // tried again next round
			}
			ls := r.leases[i]
			switch m.Res[0] {
			case 1:
				ls.expiry = now.Add(ls.c.lease)
			case 0:
				// Missing, and the key at its cap: re-asserting would
				// exceed it, so the lease is lost (its Release says so).
				delete(k.leases, ls)
			}
		}
		if replies == nil {
			retry = append(retry, r.lost...) // the breaker kept the round away
		}
		k.mu.Unlock()
		for i, m := range replies {
			if m.Err == nil && len(m.Res) == 2 {
				l.foreignLease(ops[i].keys[0], m.Res[1])
			}
		}
	}
	if len(retry) > 0 {
		k.mu.Lock()
		k.lost = append(k.lost, retry...)
		k.mu.Unlock()
	}
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
