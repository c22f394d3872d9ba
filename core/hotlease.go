package core

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// This file holds token leases for hot keys (see Rule.WithTokenLeases): a
// replica takes tokens out of a key's buckets in one atomic call
// (lease.lua, kind OpLease on the one road), spends them at memory speed,
// and gives back what it did not spend (OpLeaseReturn) when its key cools,
// its lease nears its end, or the limiter closes.
//
// Per replica and key, a hotKey goes through these states:
//
//	state      hand  what a decision does
//	---------  ----  --------------------------------------------------------
//	cold       0     decided as without leases (the key's rate is measured)
//	taking     any   one caller's take is in flight; others spend the hand,
//	                 or are decided as without leases when it is empty
//	holding    > 0   spends the hand; the caller that sees it low or half
//	                 its life gone takes more (carrying the hand over)
//	exhausted  0     the last take granted nothing: decided as without
//	                 leases for half a lease's life, so Redis decides the
//	                 last tokens exactly
//
// The keeper goroutine gives back the hands of keys that cooled or near
// their end; a hand whose lease ended before it was given back is lost
// (counted as such): the tokens stay spent, never spent twice.

// Operation kinds of token leases, as [StoreCall.Op] reports them.
const (
	OpLease       = "lease"        // a token lease taken (with the request that asked, if any)
	OpLeaseReturn = "lease_return" // a token lease's unspent tokens given back
)

// SourceLease is a decision made from a token lease this replica holds
// (see [Rule.WithTokenLeases]): an admission, at memory speed, of tokens
// Redis handed out before.
const SourceLease Source = 16

// LeaseBound is the error a rule with token leases accepts (see
// [Rule.WithTokenLeases]): how many tokens, at most, all replicas' leases
// may keep from the key's users at once. Set Tokens, or Fraction (of the
// smallest Burst of the rule's limits); Tokens wins when both are set.
// Its zero value is invalid.
type LeaseBound struct {
	// Tokens is the bound in events.
	Tokens int64
	// Fraction is the bound as a fraction of the smallest Burst, in (0, 0.5].
	Fraction float64
}

// microseconds

// minLeaseLife is the shortest useful lease: below it the bound is too
// tight for leases to save round trips.
const minLeaseLife = 2_000 // microseconds

// leaseConf is a plan's token leases.
type leaseConf struct {
	bound int64 // events (see LeaseBound)
	life  int64 // microseconds a lease lives
	exact *plan // the same plan without leases: reservations, Wait
}

// WithTokenLeases returns a rule with the same limits, scope and buckets
// whose hot keys are decided from token leases: a replica takes a lease of
// k tokens out of the key's buckets in one atomic Redis call, admits from
// it locally at memory speed, and gives back what it did not spend when
// the key cools or the lease ends. k adapts to the key's rate on this
// replica and to the round trip, so a cold key is decided by Redis exactly
// as without leases and a hot key costs one round trip per k decisions;
// near exhaustion leases shrink to nothing and Redis decides the last
// tokens exactly.
//
// The bound: admissions never exceed the limits, over any window (tokens
// leave the bucket before they are spent, and the bucket is kept from
// refilling under tokens in hand). The only error is under-admission: at
// any moment at most bound tokens are held in leases, unspent, or held
// back from the bucket while leases live (Redis enforces it across every
// replica). A lease lives at most half a second, less for a tight bound.
//
// Other behaviour under leases: [Result.Remaining] of an admission from a
// lease is the bucket's remaining tokens as of this replica's last lease
// call plus the tokens it holds (other replicas' spending since is not
// seen); Wait and [Rule.Reserve] are decided by Redis exactly, without
// leases; a penalty lock set by a denial on another replica takes effect
// here when this replica's lease ends; while the store is unavailable a
// replica spends the lease it holds, until the lease ends, then decides
// under the failure policy; [Limiter.Close] gives back what is unspent.
// Observers that implement [LeaseObserver] are told of every lease.
//
// Apply WithTokenLeases last: [Rule.DryRun], [Rule.WithPenalty],
// [Rule.WithEnforce], [Rule.WithWarning] and [Rule.WithShadowLimits]
// return rules without leases. It returns an error for an invalid bound,
// a rule with a stepped limit (see [Refill]) or shadow limits, or a bound
// too small for a lease to live 2 ms without exceeding it. On a
// [NewMemory] limiter, which makes every decision in memory anyway, the
// rule is returned as is.
func (r *Rule) WithTokenLeases(bound LeaseBound) (*Rule, error) {
	l := r.lim
	if l.store.InProcess() {
		return r, nil
	}
	if r.p.Stepped {
		return nil, fmt.Errorf("%w: token leases support continuous refills only; %v has a stepped one", ErrInvalidLimit, r.p.limits)
	}
	if r.p.shadow != nil {
		// A leased admission asks no store, so it could not decide them.
		return nil, fmt.Errorf("%w: token leases cannot be used with shadow limits (Rule.WithShadowLimits)", ErrInvalidLimit)
	}
	e := bound.Tokens
	if e == 0 {
		if !(bound.Fraction > 0 && bound.Fraction <= 0.5) {
			return nil, fmt.Errorf("%w: LeaseBound.Fraction must be in (0, 0.5], got %v", ErrInvalidLimit, bound.Fraction)
		}
		e = int64(bound.Fraction * float64(r.p.minB))
	}
	if e < 2 || e > math.MaxInt32 {
		return nil, fmt.Errorf("%w: LeaseBound of %d tokens; it must be from 2 to %d", ErrInvalidLimit, e, math.MaxInt32)
	}
	// The hold-back (rate * life) takes at most half the bound.
	life := int64(maxLeaseLife)
	for _, t := range r.p.Ticks {
		if lf := e * t.P / (2 * t.R); lf < life {
			life = lf
		}
	}
	if life < minLeaseLife {
		return nil, fmt.Errorf("%w: a LeaseBound of %d tokens lets a lease live %d µs, under %d µs: use a larger bound, or no leases", ErrInvalidLimit, e, life, minLeaseLife)
	}
	exact, err := l.plans.compileScoped(r.p.scope, r.p.limits)
	if err != nil {
		return nil, err
	}
	exact.modesOf(r.p)
	p, err := l.plans.compileScoped(r.p.scope, r.p.limits)
	if err != nil {
		return nil, err
	}
	p.modesOf(r.p)
	p.lease = &leaseConf{bound: e, life: life, exact: exact}
	l.hotLeases().noteLife(life)
	return &Rule{lim: l, p: p}, nil
}

// LeaseBound returns the rule's bound in events and how long its leases
// live; zeros for a rule without token leases.
func (r *Rule) LeaseBound() (tokens int64, life time.Duration) {
	if r.p.lease == nil {
		return 0, 0
	}
	return r.p.lease.bound, time.Duration(r.p.lease.life) * time.Microsecond
}

// LeaseObserver is an [Observer] that is also told about token leases
// (see [Rule.WithTokenLeases]). The limiter finds it with a type assertion
// on the Observer given to [WithObserver]; the sluiceprom and sluiceotel
// packages implement it. Its methods have an Observer's constraints.
type LeaseObserver interface {
	Observer
	// ObserveTokenLease is called after each lease call and give back,
	// and when a lease ends with tokens in hand, with the rule's first
	// limit. Taken less Returned, Lost and Spent, summed, is the tokens
	// this process holds.
	ObserveTokenLease(limit Limit, ev LeaseEvent)
}

// LeaseEvent is what one lease call changed, in events.
type LeaseEvent struct {
	// Taken is the tokens Redis handed out for the lease.
	Taken int64
	// Returned is the tokens given back to Redis.
	Returned int64
	// Lost is the tokens whose lease ended before they were spent or
	// given back (the give back failed, or came too late): they stay
	// spent.
	Lost int64
	// Spent is the tokens admitted from the lease since the last event.
	Spent int64
}

// hotID names a key under a plan.
type hotID struct {
	plan uint64
	key  string
}

// hotShards and hotPerShard bound the keys a limiter tracks for leases.
const (
	hotShards   = 64
	hotPerShard = 256
)

// hotLeases is a limiter's token lease state: the keys it tracks and the
// keeper that gives back hands.
type hotLeases struct {
	l      *Limiter
	shards [hotShards]struct {
		mu sync.Mutex
		m  map[hotID]*hotKey
	}
	minLife atomic.Int64 // the shortest lease life of any rule

	mu     sync.Mutex
	held   map[*hotKey]struct{} // keys with tokens in hand
	stop   chan struct{}
	done   chan struct{} // nil: the keeper is not running
	closed bool
}

// hotLeases returns the limiter's lease state, made on first use.
func (l *Limiter) hotLeases() *hotLeases {
	return l.hot.get(func() *hotLeases {
		h := &hotLeases{l: l, held: map[*hotKey]struct{}{}, stop: make(chan struct{})}
		for i := range h.shards {
			h.shards[i].m = map[hotID]*hotKey{}
		}
		h.minLife.Store(maxLeaseLife)
		return h
	})
}

func (h *hotLeases) noteLife(life int64) {
	for {
		cur := h.minLife.Load()
		if life >= cur || h.minLife.CompareAndSwap(cur, life) {
			return
		}
	}
}

// keeperFloor bounds, in microseconds, how often the keeper looks for
// hands to give back. A key that cools with a lease shorter than this
// gives its hand back after the lease ended, which Redis allows for 10 s
// (see lease.lua); a hot key carries its hand into its next lease.
const keeperFloor = 20_000

// hotKey is one key's lease on this replica; mu guards its fields.
type hotKey struct {
	mu       sync.Mutex
	key      string
	p        *plan
	id       string // the lease's id in the key's holds
	hand     int64  // tokens in hand
	expires  int64  // local microsecond the lease ends
	inflight bool   // a take or give back is in flight
	noLease  int64  // until this microsecond, decide without leases (exhausted)
	noTake   int64  // until this microsecond, take nothing (the bound is full); the hand is spent
	fails    int    // takes in a row that were denied or granted nothing
	spent    int64  // admitted from the hand since the last event
	lastUse  int64

	winStart, winCount int64   // the current window of the rate estimate
	rate               float64 // events per microsecond
	rtt                int64   // microseconds, the last take's
	took               int64   // the hand after the last take

	// ahead bounds Redis's clock less this limiter's from above: each
	// take's Redis time less the instant it was sent is such a bound (the
	// script ran after the send), the least of them the tightest; kept
	// over the current and the last window of aheadWindow, so that the
	// clocks' drift stays negligible. aheadAt is the current window's
	// start; aheadOK reports whether any bound is known.
	ahead, aheadLast, aheadAt int64
	aheadOK                   bool

	// winWait is the microseconds decisions of the key decided without
	// leases spent waiting for Redis in the current window, and busy
	// their average number in flight (waited time over elapsed time, by
	// Little's law): a key with a decision in flight most of the time is
	// bound by the round trip however low its rate looks, as one caller
	// that waits for each answer is.
	winWait int64
	busy    float64

	remaining int64 // the bucket's remaining at the last take
	resetAt   int64 // local microsecond the bucket is full, at the last take
	index     int   // the limit that decided the last take
}

// get returns the state of key under p, made if there is room; nil if not.
func (h *hotLeases) get(p *plan, key string, now int64) *hotKey {
	id := hotID{p.ID, key}
	sh := &h.shards[fnv(key, p.ID)%hotShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if hk := sh.m[id]; hk != nil {
		return hk
	}
	if len(sh.m) >= hotPerShard {
		// Drop a key that holds nothing and has been idle for a while.
		for k, v := range sh.m {
			if v.mu.TryLock() {
				idle := v.hand == 0 && !v.inflight && now-v.lastUse > 2*p.lease.life
				v.mu.Unlock()
				if idle {
					delete(sh.m, k)
					break
				}
			}
		}
		if len(sh.m) >= hotPerShard {
			return nil
		}
	}
	key = string(append([]byte(nil), key...))
	hk := &hotKey{key: key, p: p, id: newID(), winStart: now, lastUse: now}
	sh.m[hotID{p.ID, key}] = hk
	return hk
}

func fnv(s string, seed uint64) uint64 {
	h := seed ^ 14695981039346656037
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// count adds a decision of cost to the rate estimate; hk.mu is held.
func (hk *hotKey) count(now, cost, life int64) {
	hk.winCount += cost
	// A window ends after half a lease's life, or sooner once it has
	// counted enough to judge: a key that turns hot is found within a
	// few milliseconds.
	if el := now - hk.winStart; el >= life/2 || hk.winCount >= 64 && el >= 1000 {
		inst, busy := float64(hk.winCount)/float64(el), float64(hk.winWait)/float64(el)
		if el > 4*life || hk.rate == 0 {
			hk.rate, hk.busy = inst, busy
		} else {
			hk.rate, hk.busy = (hk.rate+inst)/2, (hk.busy+busy)/2
		}
		hk.winStart, hk.winCount, hk.winWait = now, 0, 0
	}
}

// waited adds a decision decided without leases, from start to end, to
// the estimate of decisions in flight.
func (hk *hotKey) waited(start, end int64) {
	hk.mu.Lock()
	hk.winWait += max(0, end-start)
	hk.mu.Unlock()
}

// cold reports whether the key is decided without leases for its rate: a
// lease would hold fewer than 2 tokens for half its life, unless the key is
// bound by the round trip (a decision in flight at least half the time) and
// uses a token in two lives at least.
func (hk *hotKey) cold(life int64) bool {
	per := hk.rate * float64(life)
	return per < 4 && (hk.busy < 0.5 || per < 0.5)
}

// want is how many tokens a take asks for: what the key uses in half a
// lease's life, at this replica's rate; for a key bound by the round trip
// (its rate is what Redis lets through, not what the callers would use)
// the bound, of which Redis grants this replica's share.
func (hk *hotKey) want(lc *leaseConf) int64 {
	if hk.busy >= 0.5 {
		return lc.bound
	}
	return int64(math.Ceil(hk.rate * float64(lc.life) / 2))
}

// lowWater is the hand below which a take starts: what the key uses
// during two round trips, and at most half of what the last take left in
// hand (a take cannot bring more than Redis's share for this replica).
func (hk *hotKey) lowWater() int64 {
	return min(int64(math.Ceil(hk.rate*float64(2*hk.rtt)))+1, max(hk.took/2, 1))
}

// aheadWindow is how long, in microseconds, a bound on Redis's clock
// less this limiter's serves: at a drift of 100 ppm between the clocks it
// errs by at most 50 µs over two windows.
const aheadWindow = 250_000

// leaseEnd returns when, on this limiter's clock, a lease of life that
// Redis began at its instant at (0: unknown) ends, for a take sent at sent
// and answered at recv; hk.mu is held. The lease lives on Redis's clock
// from the instant the script ran, which under load can be long after the
// send (the call waited in queues): the end is at + life less the least
// bound on the clocks' difference seen lately (see hotKey.ahead), never
// before sent + life (the script ran after the send) nor after
// recv + life (nor before the answer came).
func (hk *hotKey) leaseEnd(sent, recv, at, life int64) int64 {
	if at <= 0 {
		return sent + life
	}
	b := at - sent
	switch {
	case !hk.aheadOK:
		hk.ahead, hk.aheadLast, hk.aheadAt, hk.aheadOK = b, b, sent, true
	case sent-hk.aheadAt >= aheadWindow:
		hk.aheadLast, hk.ahead, hk.aheadAt = hk.ahead, b, sent
	case b < hk.ahead:
		hk.ahead = b
	}
	end := at + life - min(hk.ahead, hk.aheadLast)
	return min(max(end, sent+life), recv+life)
}

// result is an admission from the hand at now, not yet marked DryRun;
// hk.mu is held.
func (hk *hotKey) result(p *plan, now int64) Result {
	lim := p.limits[hk.index]
	rem := min(hk.remaining+hk.hand, int64(lim.Burst))
	return Result{Allowed: true, Remaining: int(rem), ResetAfter: time.Duration(max(0, hk.resetAt-now)) * time.Microsecond, Limit: lim}
}

// leaseAdmit decides a request of cost on key under p, a plan with token
// leases, if leases decide it: ok false sends it down the usual path, and
// the caller tells hk (if not nil) how long Redis took (hotKey.waited).
func (l *Limiter) leaseAdmit(ctx context.Context, key string, p *plan, cost, now int64, o *outcome) (ok bool, hk *hotKey, err error) {
	h := l.hotLeases()
	hk = h.get(p, key, now)
	if hk == nil {
		return false, nil, nil
	}
	lc := p.lease
	hk.mu.Lock()
	hk.count(now, cost, lc.life)
	if hk.hand >= cost && now < hk.expires && now >= hk.noLease { // (noLease: exhausted, or locked; see Rule.Lock)
		hk.hand -= cost
		hk.spent += cost
		hk.lastUse = now
		o.res = hk.result(p, now)
		res := &o.res
		res.DryRun = p.dry(key)
		res.Time = instant(now)
		p.marked(res)
		idx := hk.index
		more := !hk.inflight && now >= hk.noTake && (hk.hand < hk.lowWater() || hk.expires-now < lc.life/2)
		if more {
			hk.inflight = true
		}
		hk.mu.Unlock()
		if l.obs != nil {
			l.obs.ObserveDecision(*res, SourceLease)
		}
		if more {
			_, _ = l.leaseTake(ctx, hk, 0, now)
		}
		o.d = decision{Allowed: true, Remaining: int64(res.Remaining), Reset: micros(res.ResetAfter), Index: idx}
		if res.Warning {
			l.warned(ctx, key, p, res, &o.d, cost, now)
		}
		return true, nil, nil
	}
	if hk.inflight || now < hk.noLease || now < hk.noTake || hk.cold(lc.life) {
		// Taking already, exhausted, or cold: as without leases.
		hk.mu.Unlock()
		return false, hk, nil
	}
	hk.inflight = true
	hk.lastUse = now
	hk.mu.Unlock()
	var na *noAnswer
	o.d, na = l.leaseTake(ctx, hk, cost, now)
	if na == nil {
		l.answered(key, p, &o.d, cost, now)
		l.decided(ctx, key, p, o, cost, now)
		return true, nil, nil
	}
	if na.Gone != nil {
		return true, nil, na.Gone
	}
	return true, nil, l.fallback(key, p, now, cost, 0, na.Cause, o)
}

// leaseTake sends a take for hk (with a request of cost, 0 for none)
// sent at now, carrying its hand, and applies the reply. hk.inflight is
// set; leaseTake clears it.
func (l *Limiter) leaseTake(ctx context.Context, hk *hotKey, cost, now int64) (decision, *noAnswer) {
	p, lc := hk.p, hk.p.lease
	hk.mu.Lock()
	carry, want, spent := hk.hand, hk.want(lc), hk.spent
	if now >= hk.expires && carry > 0 {
		// The lease ended here with tokens in hand: nothing of it is
		// spent any more, and the take gives them back first.
		carry, hk.hand = -carry, 0
	}
	hk.spent = 0
	hk.mu.Unlock()
	if spent > 0 {
		// Keep the fallback warm with what the hand admitted.
		l.local.charge(p.ID, hk.key, now, l.share(p).ticks, spent, false)
	}
	start := time.Now()
	a, na := l.store.Lease(ctx, &leaseCall{Plan: &p.Plan, Life: p.lease.life, Bound: p.lease.bound, Key: hk.key, ID: hk.id, Cost: cost, Want: min(want+cost, lc.bound), Carry: carry, Penalty: l.penaltyOf(p), Now: now})
	rtt := int64(time.Since(start) / time.Microsecond)
	var lost int64
	if carry < 0 {
		lost = -carry - a.Refunds // what the take could not give back
	}
	if a.Refunds > 0 && l.denies != nil {
		l.denies.delete(p.ID, hk.key)
	}
	hk.mu.Lock()
	hk.inflight = false
	if na != nil {
		hk.spent += spent // reported with the next event
		hk.mu.Unlock()
		l.observeLease(p, LeaseEvent{Lost: lost})
		return decision{}, na
	}
	d := a.Decision
	hk.rtt = rtt
	hk.winWait += rtt // a caller waited for it, as for a decision without leases
	hk.remaining, hk.resetAt, hk.index = d.Remaining, now+d.Reset, d.Index
	if d.Allowed && a.Life > 0 {
		hk.hand += a.Granted
		hk.expires = hk.leaseEnd(now, l.now(), a.At, a.Life)
	}
	hk.took = hk.hand
	switch {
	case a.Granted > 0:
		hk.fails = 0
	case d.Allowed && d.Remaining >= 2:
		// Nothing granted although the bucket has tokens to spare: other
		// replicas' holds fill the bound. Try again after a quarter of a
		// lease's life, when some of them have ended or been given back,
		// rather than backing off as from an exhausted key.
		hk.noTake = now + lc.life/4
	default:
		// Denied, or nothing granted: the key is at or near exhaustion.
		// Redis decides it exactly (with the deny cache) for a while,
		// twice as long after each such take in a row, up to a second,
		// rather than a take per request.
		hk.fails = min(hk.fails+1, 16)
		hk.noLease = now + max(min(lc.life/2<<(hk.fails-1), 1_000_000), d.Retry)
	}
	holding := hk.hand > 0
	hk.mu.Unlock()
	if holding {
		l.hotLeases().hold(hk) // not under hk.mu: the keeper locks h.mu, then hk.mu
	}
	l.observeLease(p, LeaseEvent{Taken: a.Granted, Spent: spent, Returned: a.Refunds, Lost: lost})
	return d, nil
}

// giveBack gives hk's hand back to Redis.
func (l *Limiter) giveBack(ctx context.Context, hk *hotKey) {
	p := hk.p
	now := l.now()
	hk.mu.Lock()
	if hk.inflight || hk.hand == 0 {
		hk.mu.Unlock()
		return
	}
	// A lease that ended is given back too: Redis keeps its hold a while
	// for it (see lease.lua).
	u, spent := hk.hand, hk.spent
	hk.hand, hk.spent, hk.inflight = 0, 0, true
	hk.mu.Unlock()
	a, _ := l.store.Lease(ctx, &leaseCall{Plan: &p.Plan, Life: p.lease.life, Bound: p.lease.bound, Key: hk.key, ID: hk.id, Back: true, Carry: u, Now: now})
	back := a.Refunds
	if back > 0 && l.denies != nil {
		l.denies.delete(p.ID, hk.key) // tokens came back: as a refund does
	}
	hk.mu.Lock()
	hk.inflight = false
	hk.mu.Unlock()
	// What Redis did not take back is lost: the give back failed, or
	// came too long after the lease ended there.
	l.observeLease(p, LeaseEvent{Returned: back, Lost: u - back, Spent: spent})
}

func (l *Limiter) observeLease(p *plan, ev LeaseEvent) {
	if ev == (LeaseEvent{}) {
		return
	}
	if lo, ok := l.obs.(LeaseObserver); ok {
		lo.ObserveTokenLease(p.limits[0], ev)
	}
}

// hold adds hk to the keys with tokens in hand, and starts the keeper.
func (h *hotLeases) hold(hk *hotKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.held[hk] = struct{}{}
	if h.done == nil {
		h.done = make(chan struct{})
		go h.loop(h.done)
	}
}

// loop gives back the hands of keys that cooled or whose lease nears its
// end, until none is held or the limiter closes.
func (h *hotLeases) loop(done chan struct{}) {
	defer close(done)
	period := time.Duration(max(h.minLife.Load()/4, keeperFloor)) * time.Microsecond
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-tick.C:
		}
		if !h.round(false) {
			return
		}
	}
}

// round gives back what is due (everything, with all) and reports
// whether the keeper should go on.
func (h *hotLeases) round(all bool) bool {
	l := h.l
	now := l.now()
	h.mu.Lock()
	var due []*hotKey
	type spentOf struct {
		p     *plan
		spent int64
	}
	var spent []spentOf
	for hk := range h.held {
		hk.mu.Lock()
		life := hk.p.lease.life
		switch {
		case hk.hand == 0 && !hk.inflight:
			delete(h.held, hk)
			if hk.spent > 0 {
				spent = append(spent, spentOf{hk.p, hk.spent})
				hk.spent = 0
			}
		case all, hk.expires-now < life/4, now-hk.lastUse > life/4:
			due = append(due, hk)
		}
		hk.mu.Unlock()
	}
	goOn := len(h.held) > 0 && !h.closed
	if !goOn && !all {
		h.done = nil
	}
	h.mu.Unlock()
	for _, sp := range spent {
		l.observeLease(sp.p, LeaseEvent{Spent: sp.spent})
	}
	if len(due) == 0 {
		return goOn
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(l.timeout, 100*time.Millisecond))
	defer cancel()
	var wg sync.WaitGroup
	for _, hk := range due {
		wg.Add(1)
		go func() { // concurrent give backs share a pipeline per node
			defer wg.Done()
			l.giveBack(ctx, hk)
		}()
	}
	wg.Wait()
	return goOn
}

// close stops the keeper and gives back every hand.
func (h *hotLeases) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.stop)
	done := h.done
	h.mu.Unlock()
	if done != nil {
		<-done
	}
	// Wait for takes in flight, briefly, then give back.
	for range 100 {
		busy := false
		h.mu.Lock()
		for hk := range h.held {
			hk.mu.Lock()
			busy = busy || hk.inflight
			hk.mu.Unlock()
		}
		h.mu.Unlock()
		if !busy {
			break
		}
		time.Sleep(time.Millisecond)
	}
	h.round(true)
}
