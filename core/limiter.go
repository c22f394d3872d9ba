package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// Limiter is the engine: it decides requests against token buckets kept in
// Redis, and while Redis is unavailable it decides under its
// [FailurePolicy]. One Limiter serves any number of limits, keys and
// middlewares; each call names its key and its limits.
//
// A Limiter is safe for concurrent use. It holds no resources beyond memory
// and the goroutines it starts as needed, each of which [Limiter.Close]
// stops and waits for: with [WithFleet], one heartbeat loop; with
// [WithTopTalkers], one flush loop (which flushes once more); while
// concurrency slots are held, their renewal loop; while token leases are
// held, their give-back loop; and short tasks (the implicit fleet's
// heartbeats, a node's eviction policy read, warm-ups of a node's
// connection pools after a failure, a decision run apart for a client
// that ignores deadlines). A limiter made by [NewMemory] starts none. The
// Redis client stays the caller's to close, after Close. Its zero value is
// not usable; create one with [New] or [NewMemory].
type Limiter struct {
	store    store             // where the buckets are: Redis (New), or this process's memory (NewMemory)
	remote   bool              // the store is not this process's memory: its answers keep the fallback warm
	plans    planCache         // compiled limits
	local    *localStore       // the fallback's buckets and slots (NewMemory: the store's own)
	denies   *denyCache        // nil when disabled
	policy   FailurePolicy     // how a request the store did not answer is decided (see unavailable)
	fleet    *fleet            // sizes the fallback: WithFleet, or the implicit fleet; nil for neither
	replicas int               // WithFallbackReplicas: the fallback's divisor without a fleet, and its floor
	penalty  int64             // WithPenalty, microseconds
	timeout  time.Duration     // WithTimeout: the store's budget per call
	obs      Observer          // nil: none
	logs     logs              // where and what the engine logs
	keep     lazy[leaseKeeper] // renews concurrency leases (see Concurrency)
	hot      lazy[hotLeases]   // token leases of hot keys (see Rule.WithTokenLeases)
	bg       background        // the engine's background tasks (the implicit fleet's beats), stopped by Close
	now      func() int64      // the limiter's clock, microseconds; replaced by tests and WithClock
}

// logs is the engine's logger and what it has logged once.
type logs struct {
	logger      *slog.Logger // WithLogger; nil: slog.Default() at the time of each line
	coarseSaid  sync.Map     // global Limit -> struct{}: a replaced fallback was logged
	coarseCount atomic.Int32
}

// lazy holds a *T made on first use.
type lazy[T any] struct {
	once sync.Once
	v    *T
}

// get returns the value, made by mk on first use.
func (z *lazy[T]) get(mk func() *T) *T {
	z.once.Do(func() { z.v = mk() })
	return z.v
}

// NewMemory returns a Limiter that keeps its buckets in process memory, with
// the same API, arithmetic and results as a Redis-backed one: for a single
// process, and for tests. Its limits hold per process, not across replicas.
// Memory is bounded by [WithLocalCapacity]; options about Redis and
// degradation have no effect. [WithClock] sets the clock it reads.
func NewMemory(opts ...Option) (*Limiter, error) {
	l, o, err := newLimiter(opts)
	if err != nil {
		return nil, err
	}
	if o.clock != nil {
		clock := o.clock
		l.now = func() int64 { return clock().UnixMicro() }
	}
	l.denies = nil
	l.store = memStore{local: l.local, top: &memTop{}}
	l.startTop()
	return l, nil
}

func newLimiter(opts []Option) (*Limiter, options, error) {
	o := defaultOptions()
	for i, opt := range opts {
		if opt == nil {
			return nil, o, fmt.Errorf("core: option %d of %d is nil", i, len(opts))
		}
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, o, err
	}
	l := &Limiter{
		penalty:  micros(o.penalty),
		timeout:  o.timeout,
		policy:   o.policy,
		local:    newLocalStore(o.capacity),
		obs:      o.observer,
		logs:     logs{logger: o.logger},
		replicas: o.replicas,
	}
	epoch := time.Now()
	epochUS := epoch.UnixMicro()
	l.now = func() int64 { return epochUS + int64(time.Since(epoch)/time.Microsecond) }
	l.plans.fallback = fallbackFunc(o)
	l.plans.warn = l.warnCoarse
	l.plans.canaryHash = newCanaryHash(o.slotKey)
	l.plans.thresholds = newThresholds(o)
	if o.denyCache {
		l.denies = newDenyCache(o.capacity)
	}
	if o.topOn {
		t, err := newTopTalkers(o.top)
		if err != nil {
			return nil, o, err
		}
		l.plans.top = t
	}
	return l, o, nil
}

func fallbackFunc(o options) func(Limit) Limit {
	if o.fallback != nil {
		return o.fallback
	}
	return shareOf(o.replicas)
}

// overflowPeriod marks a share whose Period (the limit's times the
// replicas) a time.Duration cannot hold.
const overflowPeriod = time.Duration(math.MinInt64)

// shareOf returns the fallback function giving each of n replicas its
// share of a limit; nil for one replica.
func shareOf(n int) func(Limit) Limit {
	if n <= 1 {
		return nil
	}
	return func(g Limit) Limit {
		switch {
		case g.Refill == RefillInterval: // ceil(Rate/n) at the same instants
			return Limit{Name: g.Name, Rate: (g.Rate + n - 1) / n, Period: g.Period, Burst: (g.Burst + n - 1) / n, Refill: g.Refill}
		case g.Refill.calendar(): // ceil(quota/n) per period, at the same boundaries
			q := (g.Rate + n - 1) / n
			return Limit{Name: g.Name, Rate: q, Burst: q, Refill: g.Refill, Zone: g.Zone}
		}
		share := Limit{Name: g.Name, Rate: g.Rate, Period: g.Period * time.Duration(n), Burst: (g.Burst + n - 1) / n}
		if g.Period > math.MaxInt64/time.Duration(n) {
			share.Period = overflowPeriod // newShare keeps the global rate, and says why
		}
		return share
	}
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Func, reflect.Slice, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// Allow is shorthand for [Limiter.AllowN] with a cost of 1.
func (l *Limiter) Allow(ctx context.Context, key string, limits ...Limit) (Result, error) {
	return l.AllowN(ctx, key, 1, limits...)
}

// AllowN decides whether an event of cost n on key is admitted under every
// one of limits, and consumes n tokens from each if so. The limits are
// checked and consumed atomically, in one Redis call: the event is admitted
// only if every limit admits it, and a denied event consumes nothing.
//
// A denial is a Result with Allowed false and a nil error. AllowN returns an
// error for an empty key, for no limits, an
// invalid limit, n < 1 or n greater than a limit's Burst (wrapping
// [ErrInvalidLimit]), for the caller's own ended context (its error), and,
// under [FailClosed] only, while the store is unavailable (wrapping
// [ErrUnavailable]).
func (l *Limiter) AllowN(ctx context.Context, key string, n int, limits ...Limit) (Result, error) {
	p := l.plans.hit(limits)
	if p == nil {
		var err error
		if p, err = l.plans.getSlow(limits); err != nil {
			return Result{}, err
		}
	}
	var o outcome
	err := l.admit(ctx, key, p, n, 0, &o)
	return o.res, err
}

// Wait reserves n tokens on key under limits and sleeps until they are due;
// the Result's Wait says how long that is (zero if they are due at once).
// If they cannot be due before ctx's deadline, Wait reserves nothing and
// returns at once with Allowed false and RetryAfter set, as AllowN does. A
// context without a deadline waits as long as needed.
//
// If ctx ends while Wait sleeps, it returns ctx's error; the reservation is
// kept (the tokens are spent), so a cancelled wait never lets more through
// than the limit. Errors are otherwise those of [Limiter.AllowN].
func (l *Limiter) Wait(ctx context.Context, key string, n int, limits ...Limit) (Result, error) {
	p, err := l.plans.get(limits)
	if err != nil {
		return Result{}, err
	}
	return l.wait(ctx, key, p, n)
}

// wait is Wait with a compiled plan.
func (l *Limiter) wait(ctx context.Context, key string, p *plan, n int) (Result, error) {
	maxWait := p.maxW
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return Result{}, context.DeadlineExceeded
		}
		maxWait = min(maxWait, int64(left/time.Microsecond))
	}
	var o outcome
	err := l.admit(ctx, key, p, n, maxWait, &o)
	if err != nil || !o.res.Allowed || o.d.Wait == 0 {
		return o.res, err
	}
	t := time.NewTimer(time.Duration(o.d.Wait) * time.Microsecond)
	defer t.Stop()
	select {
	case <-t.C:
		return o.res, nil
	case <-ctx.Done():
		return o.res, ctx.Err()
	}
}

// outcome is one request's decision and the Result made of it. The
// engine's deciding functions fill one in place, handed down by pointer:
// returned by value, the two were copied again at every layer, which cost
// a lone decision about a fifth of the limiter's own instructions and a
// tenth of its code lines (clientcost -cold).
type outcome struct {
	res Result
	d   decision
}

// admit decides a request on key into o (see decideKey), which counts it
// in the plan's top-talkers sketches, if any. It is inlined: its own
// frame, which counted the request after decideKey returned, cost a lone
// decision four code lines from cold (clientcost -cold).
func (l *Limiter) admit(ctx context.Context, key string, p *plan, n int, maxWait int64, o *outcome) error {
	return l.decideKey(ctx, key, p, n, maxWait, 0, o)
}

// counted returns err, once a request of cost n on key decided into o
// without error is counted in p's top-talkers sketches, if p has them.
// Only the outermost decideKey counts (past 0): a layer that calls it
// again passes what it passed, so a request is counted once.
func (l *Limiter) counted(key string, p *plan, n int, past passed, o *outcome, err error) error {
	if err == nil && past == 0 && p.top != nil {
		p.top.record(key, o.d.Allowed, int64(n), o.d.Index)
	}
	return err
}

// decideKey validates a request on key and decides it into o: by its
// token lease or the deny cache, when its plan has the one or the limiter
// holds the other (see leaseFirst and cacheFirst), else from the store,
// or, when the store is unavailable, under the failure policy. past says
// which of those two the request has passed already: each calls
// decideKey again when it cannot answer, so that a plain request's whole
// path is this one function (each frame cost a lone decision code lines
// from cold; clientcost -cold).
func (l *Limiter) decideKey(ctx context.Context, key string, p *plan, n int, maxWait int64, past passed, o *outcome) error {
	if key == "" {
		return errEmptyKey
	}
	// checkCost, inline: with answered's call below, it cost an in-memory
	// decision and a deny-cache hit 3-5% (benchstat, 12 runs).
	if n < 1 || int64(n) > p.minB {
		return costError(n, p.minB)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if maxWait == 0 && (p.lease != nil && past&pastLease == 0 || n == 1 && past&pastCache == 0 && l.denies.holdsAny()) {
		return l.layered(ctx, key, p, n, past, o)
	}
	now := l.now()
	cost := int64(n)
	var na *noAnswer
	o.d, na = l.store.Decide(ctx, key, &p.Plan, cost, maxWait, l.penaltyOf(p), now)
	if na != nil {
		if na.Gone != nil {
			return na.Gone // the caller gave up: no decision
		}
		return l.counted(key, p, n, past, o, l.fallback(key, p, now, cost, maxWait, na.Cause, o))
	}
	if l.remote { // a NewMemory limiter has nothing to take in
		l.answered(key, p, &o.d, cost, now)
	}
	// decided's, inline: its call cost a lone decision three code lines.
	l.done(o, p, p.dry(key), SourceStore, false)
	if p.warn != nil {
		l.warned(ctx, key, p, &o.res, &o.d, cost, now)
	}
	if p.top != nil { // the test before the call spares a plain decision counted's call
		return l.counted(key, p, n, past, o, nil)
	}
	return nil
}

// layered is decideKey for a request a layer before the store may
// answer: its plan's token lease (never on NewMemory, see
// WithTokenLeases), or the deny cache for a unit request. (Out of
// decideKey's line: there, these calls sat between the steps every
// decision takes; clientcost -cold.)
func (l *Limiter) layered(ctx context.Context, key string, p *plan, n int, past passed, o *outcome) error {
	if p.lease != nil && past&pastLease == 0 {
		return l.counted(key, p, n, past, o, l.leaseFirst(ctx, key, p, n, past, o))
	}
	return l.counted(key, p, n, past, o, l.cacheFirst(ctx, key, p, past, o))
}

// passed is the layers before the store a request has passed (see
// decideKey).
type passed uint8

const (
	pastLease passed = 1 << iota // its plan's token lease could not answer
	pastCache                    // the deny cache could not answer
)

// leaseFirst decides a request of cost n on key by its plan's token
// lease (see WithTokenLeases), else as decideKey does without it; the
// time that takes counts as the hot key's wait for the store.
func (l *Limiter) leaseFirst(ctx context.Context, key string, p *plan, n int, past passed, o *outcome) error {
	now := l.now()
	ok, hk, err := l.leaseAdmit(ctx, key, p, int64(n), now, o)
	if ok {
		return err
	}
	err = l.decideKey(ctx, key, p, n, 0, past|pastLease, o)
	if hk != nil {
		hk.waited(now, l.now())
	}
	return err
}

// cacheFirst decides a unit request on key by the deny cache, else as
// decideKey does without it, holding the key's probe (if it got one)
// until the store has answered.
func (l *Limiter) cacheFirst(ctx context.Context, key string, p *plan, past passed, o *outcome) error {
	now := l.now()
	hit, probe, err := l.denyCached(ctx, key, p, &now, o)
	if hit || err != nil {
		return err
	}
	if probe != nil {
		defer l.denies.release(p.ID, key, probe)
	}
	return l.decideKey(ctx, key, p, 1, 0, past|pastCache, o)
}

// denyCached looks key up in the deny cache at *now: hit reports a
// denial it decided into o; otherwise, probe not nil, this request asks
// Redis for the others waiting on key, and releases probe when answered.
// It waits for another request's probe first (*now moves then).
func (l *Limiter) denyCached(ctx context.Context, key string, p *plan, now *int64, o *outcome) (hit bool, probe chan struct{}, err error) {
	dn, st, ch := l.denies.check(p.ID, key, *now)
	if st == denyWait {
		if dn, st, ch, err = l.awaitProbe(ctx, key, p, ch, now); err != nil {
			return false, nil, err
		}
	}
	switch {
	case st == denyHit && (dn.locked || l.penaltyOf(p) <= 0):
		// (A denial cached from a rule of the same bucket without a
		// penalty, see Rule.WithPenalty, is not this rule's: its
		// denial must reach the store to lock the key.)
		o.d = decision{Retry: dn.until - *now, Reset: max(0, dn.reset-*now), Locked: dn.locked, Index: int(dn.index), At: *now + dn.skew}
		l.done(o, p, p.dry(key), SourceDenyCache, false)
		return true, nil, nil
	case st == denyProbe:
		return false, ch, nil
	}
	return false, nil, nil
}

// awaitProbe waits for the answer of another request asking Redis about
// key (its probe, ch), which is this one's too unless it leaves the key
// open, or for ctx, then looks the key up again at the present (*now
// moves: a stale clock would deny what Redis admits).
func (l *Limiter) awaitProbe(ctx context.Context, key string, p *plan, ch chan struct{}, now *int64) (denial, denyState, chan struct{}, error) {
	select {
	case <-ch:
	case <-ctx.Done():
		return denial{}, denyMiss, nil, ctx.Err()
	}
	*now = l.now()
	dn, st, ch := l.denies.check(p.ID, key, *now)
	return dn, st, ch, nil
}

// checkCost validates a request of cost n under limits whose smallest
// Burst is minB, and the caller's context: the one validation of every
// decision, of a key's or a path's.
func checkCost(ctx context.Context, n int, minB int64) error {
	if n < 1 || int64(n) > minB {
		return costError(n, minB)
	}
	return ctx.Err()
}

// costError says what is wrong with a cost checkCost refused.
func costError(n int, minB int64) error {
	if n < 1 {
		return fmt.Errorf("%w: cost must be at least 1, got %d", ErrInvalidLimit, n)
	}
	return fmt.Errorf("%w: cost %d exceeds Burst %d; such a request could never be admitted", ErrInvalidLimit, n, minB)
}

// answered takes in what the store answered to a request of cost on key
// under p at now, in the one place that does: the deny cache learns when
// a unit request can next pass, an admission is charged to the local
// fallback (kept warm for a switch to it), what the fallback admitted on
// the key while the store was away is charged to the store (owed.go), and
// the implicit fleet beats when a heartbeat is due.
func (l *Limiter) answered(key string, p *plan, d *decision, cost, now int64) {
	next := d.Next // how long the entry answers
	if p.shadow != nil {
		// A denial the cache answers reports every shadow limit as
		// denying: it answers until the first of them could admit.
		next = min(next, d.ShadowNext)
	}
	if l.denies != nil && next > 0 && (!d.Allowed || l.penaltyOf(p) == 0 && !p.Stepped) {
		// Redis said when a unit request can next pass. Counted from
		// when this request was sent, that never outlasts Redis's own
		// answer. With a penalty lock, only denials are cached: the
		// first denial must reach Redis to lock. So with a stepped
		// limit: an admission does not say which limit denies next,
		// and a quota spent until midnight should be named by the
		// denials it causes.
		l.cacheDenial(key, p, d, now, next)
	}
	if !l.remote {
		return
	}
	if d.Allowed {
		// Keep the fallback warm for keys that have used half a burst
		// or more; one less used starts the fallback from a full
		// bucket, which it nearly is, and costs no memory. (The test
		// before the call spares a lone decision charge's code.)
		if insert := 2*d.Remaining < int64(p.limits[d.Index].Burst); insert || l.local.m.live.Load() != 0 {
			l.keepWarm(key, p, cost, now, insert)
		}
	}
	if l.local.owed.holdsAny() {
		l.chargeOwed(key, p, now)
	}
	// The beat's clock test, before the call: most decisions find no
	// beat due, and call nothing.
	if f := l.fleet; f != nil && f.implicit && now-f.beatAt.Load() >= f.everyUS {
		f.maybeBeat(now, l.bg.Run)
	}
}

// penaltyOf returns the penalty lock of p's denials in microseconds: its
// rule's (see Rule.WithPenalty), else the limiter's.
func (l *Limiter) penaltyOf(p *plan) int64 {
	if p.penalty >= 0 {
		return p.penalty
	}
	return l.penalty
}

// keepWarm charges an admission of cost on key under p at now to the
// local fallback (see answered); insert adds the key if it has no bucket
// there. Out of answered's line, as cacheDenial is.
func (l *Limiter) keepWarm(key string, p *plan, cost, now int64, insert bool) {
	l.local.charge(p.ID, key, now, l.share(p).ticks, cost, insert)
}

// cacheDenial puts d, the store's answer at now to a request on key under
// p, in the deny cache, to answer until next microseconds from now (see
// answered). Out of answered's line: the denial built there sat between
// the steps every answer takes (clientcost -cold).
func (l *Limiter) cacheDenial(key string, p *plan, d *decision, now, next int64) {
	l.denies.put(p.ID, key, now, denial{until: now + d.Next, expires: now + min(next, denyMaxAge),
		reset: now + d.Reset, locked: d.Locked && !d.Allowed, index: int32(d.Index), skew: d.At - now})
}

// denyMaxAge bounds, in microseconds, how long the deny cache answers for
// a key without asking Redis again: a key reset on another replica is
// denied here for at most this long. A flooded key then costs Redis one
// call per second per replica at most, even under a long penalty lock.
const denyMaxAge = 1_000_000

// Reset clears key's state under limits (the same limits, in the same
// order, that its decisions name): its buckets are full again and any
// penalty lock is lifted, for every replica at once in Redis. This
// limiter's deny cache and local fallback forget the key too; other
// replicas' deny caches stop denying it within one second (they answer
// from a cached denial at most that long before asking Redis again).
//
// Use it to release a client after a password reset, or after an operator
// fixed a misbehaving one. Reset returns an error for an empty key or
// invalid limits, the caller's context error, and, wrapping
// [ErrUnavailable], a store failure or an open breaker (the key is then
// unchanged in Redis).
func (l *Limiter) Reset(ctx context.Context, key string, limits ...Limit) error {
	p, err := l.plans.get(limits)
	if err != nil {
		return err
	}
	return l.reset(ctx, key, p)
}

// reset is Reset with a compiled plan.
func (l *Limiter) reset(ctx context.Context, key string, p *plan) error {
	if key == "" {
		return errEmptyKey
	}
	l.local.delete(p.ID, key)
	if l.denies != nil {
		l.denies.delete(p.ID, key)
	}
	return unanswered(l.store.Reset(ctx, &p.Plan, key), "reset", key)
}

// fallback decides without the store, under the failure policy, into o.
func (l *Limiter) fallback(key string, p *plan, now, cost, maxWait int64, cause error, o *outcome) error {
	dry := p.dry(key)
	switch open, err := l.unavailable(cause, true, dry); {
	case err != nil:
		return err
	case open:
		o.d = decision{Allowed: true, Remaining: -1}
		l.done(o, p, dry, SourceFailOpen, true)
		return nil
	}
	// A request may cost more than a replica's share of the burst; it
	// then takes the whole share, rather than being denied for as long
	// as the outage lasts.
	sh := l.share(p)
	d := l.local.take(p.ID, key, now, sh.ticks, min(cost, sh.minB), maxWait, l.penaltyOf(p))
	d.At = now
	if d.Allowed && l.local.owed != nil {
		l.local.owed.admitted(p, key, now, sh.ticks, min(cost, sh.minB))
	}
	if p.shadow != nil {
		l.local.decideShadows(&d, p.shadow, l.share, key, now, cost, maxWait)
	}
	o.d = d
	res := &o.res
	res.set(&d, p)
	res.Limit = sh.limits[d.Index] // the limit actually enforced, which the observer is told too
	res.Degraded, res.DryRun = true, dry
	p.marked(res)
	res.Shadow = shadowsOf(p, &d, false)
	if l.obs != nil {
		l.obs.ObserveDecision(*res, SourceFallback)
	}
	return nil
}

// unavailable is the one switch of the failure policy, for every call the
// store did not answer (cause says why; nil when a breaker kept the call
// away): decisions of keys and paths, reservations, token leases and caps.
// Under FailOpen it reports open (admit without counting); under
// FailClosed it returns an error wrapping ErrUnavailable, observed as a
// SourceFailClosed decision when observe is set (caps have their own
// observation); under FallbackLocal, neither: the caller decides in local
// memory.
func (l *Limiter) unavailable(cause error, observe, dryRun bool) (open bool, err error) {
	switch l.policy {
	case FailOpen:
		return true, nil
	case FailClosed:
		if observe && l.obs != nil {
			l.obs.ObserveDecision(Result{DryRun: dryRun}, SourceFailClosed)
		}
		if cause == nil {
			cause = errors.New("circuit open after repeated store failures")
		}
		return false, fmt.Errorf("%w: %w", ErrUnavailable, cause)
	}
	return false, nil
}

// outageNote is the engine's words for the log line of an outage's start
// (see storeUp.note): its failure policy, and the fleet that sizes its
// fallback.
func (l *Limiter) outageNote() []any {
	attrs := []any{"policy", l.policy.String()}
	switch f := l.fleet; {
	case f != nil && f.live.Load() == 0:
		attrs = append(attrs, "warning", fmt.Sprintf("the fleet's size is not known (no heartbeat has reached Redis since this process started), so the fallback enforces 1/%d of every limit (core.UnmetFleet); give core.WithFallbackReplicas the replica count", f.unmet))
	case f != nil:
		attrs = append(attrs, "fleet", f.size())
	}
	return attrs
}

// done turns o's decision into its Result and reports it; dry marks it a
// dry run's (see plan.dry).
func (l *Limiter) done(o *outcome, p *plan, dry bool, src Source, degraded bool) {
	res := &o.res
	res.set(&o.d, p)
	res.Degraded = degraded
	res.DryRun = dry
	if p.shadow != nil && src != SourceFailOpen { // fail-open decides no shadow limit
		res.Shadow = shadowsOf(p, &o.d, src == SourceDenyCache)
	}
	if o.d.Remaining < 0 { // fail-open: nothing was counted
		res.Remaining = res.Limit.Burst
	}
	p.marked(res)
	if l.obs != nil {
		l.observe(res, src)
	}
}

// decided is done for o's decision, the store's answer to a request of
// cost on key under p at now, with its threshold event if it crossed p's
// warning threshold (see Rule.WithWarning).
func (l *Limiter) decided(ctx context.Context, key string, p *plan, o *outcome, cost, now int64) {
	l.done(o, p, p.dry(key), SourceStore, false)
	if p.warn != nil {
		l.warned(ctx, key, p, &o.res, &o.d, cost, now)
	}
}

// Logger returns the logger the limiter writes to: the one given to
// [WithLogger], or slog.Default() at the time of the call. Middleware built
// on the limiter (package policy) logs its own misconfigurations there, so
// that one setting routes all of sluice's lines.
func (l *Limiter) Logger() *slog.Logger { return l.log() }

func (l *Limiter) log() *slog.Logger {
	if l.logs.logger != nil {
		return l.logs.logger
	}
	return slog.Default()
}

// maxCoarseLogs bounds how many distinct limits have their replaced
// fallback logged.
const maxCoarseLogs = 64

// warnCoarse logs, once per global limit, that its fallback limit could not
// be used as given and the global rate is enforced per replica instead.
func (l *Limiter) warnCoarse(cs []coarseFallback) {
	for _, c := range cs {
		if l.logs.coarseCount.Load() >= maxCoarseLogs {
			return
		}
		if _, said := l.logs.coarseSaid.LoadOrStore(c.global, struct{}{}); said {
			continue
		}
		l.logs.coarseCount.Add(1)
		l.log().Warn("sluice: the local fallback keeps this limit's own rate; its per-replica share cannot be counted exactly",
			"limit", c.global.String(), "cause", c.cause)
	}
}
