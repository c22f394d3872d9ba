package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/keyfunc"
)

// Limiter is the engine: it decides requests against token buckets kept in
// Redis, and while Redis is unavailable it decides under its
// [FailurePolicy]. One Limiter serves any number of limits, keys and
// middlewares; each call names its key and its limits.
//
// A Limiter is safe for concurrent use. It starts no goroutines and holds no
// resources beyond memory, so it needs no closing; the Redis client stays
// the caller's to close. Its zero value is not usable; create one with [New]
// or [NewMemory].
type Limiter struct {
	store        *redisStore // nil for an in-memory limiter
	prefix       string
	penalty      int64 // microseconds
	timeout      time.Duration
	policy       FailurePolicy
	inflight     int // round trips before decisions are batched; 0 disables batching
	plans        planCache
	local        *localStore
	denies       *denyCache    // nil when disabled
	brk          breaker       // the store's breaker, or the template of per-node ones
	nodes        *nodeBreakers // per master node on a Cluster client; nil otherwise
	obs          Observer
	logger       *slog.Logger
	warnFallback bool // the fallback enforces whole limits per replica

	epoch   time.Time
	epochUS int64
	now     func() int64 // microseconds; replaced by tests

}

// New returns a Limiter that keeps its buckets in rdb, which may be any
// go-redis v9 client: *redis.Client, *redis.ClusterClient, *redis.Ring, a
// failover (Sentinel) client or a redis.UniversalClient.
//
// New does no network I/O. It returns an error, never a panic, for a nil
// client or an invalid option.
//
// The client must honour the limiter's time budget (see [WithTimeout]): New
// returns an error for a *redis.Client, *redis.ClusterClient or *redis.Ring
// that ignores context deadlines (ContextTimeoutEnabled false, the go-redis
// default) while its own read or write timeout exceeds the budget.
//
// For the limiter's client, set MaxRetries to -1 as well: go-redis retries a
// command whose reply was lost, and a retried decision charges its bucket
// twice (the request may then be denied early; it is never admitted twice).
// For a *redis.ClusterClient, also set ClusterStateReloadInterval to about a
// second: go-redis otherwise keeps sending a dead master's slots to its old
// address for up to a minute after a failover. docs/topologies.md has each
// topology's client settings.
//
// On a *redis.ClusterClient the limiter keeps a circuit breaker per master
// (found from go-redis's slot map), so a failing master sends only its own
// keys to the failure policy; other clients have one breaker.
func New(rdb redis.Scripter, opts ...Option) (*Limiter, error) {
	if isNil(rdb) {
		return nil, errors.New("core: nil Redis client")
	}
	l, err := newLimiter(opts)
	if err != nil {
		return nil, err
	}
	if err := checkClient(rdb, l.timeout); err != nil {
		return nil, err
	}
	l.store = newRedisStore(rdb, l.timeout, l.inflight)
	if c, ok := rdb.(*redis.ClusterClient); ok {
		l.nodes = &nodeBreakers{c: c, template: &l.brk}
	}
	return l, nil
}

// NewMemory returns a Limiter that keeps its buckets in process memory, with
// the same API, arithmetic and results as a Redis-backed one: for a single
// process, and for tests. Its limits hold per process, not across replicas.
// Memory is bounded by [WithLocalCapacity]; options about Redis and
// degradation have no effect.
func NewMemory(opts ...Option) (*Limiter, error) {
	l, err := newLimiter(opts)
	if err != nil {
		return nil, err
	}
	l.denies = nil
	return l, nil
}

func newLimiter(opts []Option) (*Limiter, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	l := &Limiter{
		prefix:       o.prefix,
		penalty:      micros(o.penalty),
		timeout:      o.timeout,
		policy:       o.policy,
		inflight:     o.inflight,
		local:        newLocalStore(o.capacity),
		obs:          o.observer,
		logger:       o.logger,
		warnFallback: !o.replicasSet && o.policy == FallbackLocal,
		epoch:        time.Now(),
	}
	l.epochUS = l.epoch.UnixMicro()
	l.now = func() int64 { return l.epochUS + int64(time.Since(l.epoch)/time.Microsecond) }
	l.brk = breaker{
		threshold: int32(o.failures),
		cooldown:  micros(o.probeEvery),
		stale:     micros(o.probeEvery) + 2*max(micros(o.timeout), 1000_000),
	}
	l.plans.fallback = fallbackFunc(o)
	if o.denyCache {
		l.denies = newDenyCache(o.capacity)
	}
	return l, nil
}

func fallbackFunc(o options) func(Limit) Limit {
	if o.fallback != nil {
		return o.fallback
	}
	n := o.replicas
	if n == 1 {
		return nil
	}
	return func(g Limit) Limit {
		return Limit{Name: g.Name, Rate: g.Rate, Period: g.Period * time.Duration(n), Burst: (g.Burst + n - 1) / n}
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
// error for an empty key (wrapping [keyfunc.ErrNoKey]), for no limits, an
// invalid limit, n < 1 or n greater than a limit's Burst (wrapping
// [ErrInvalidLimit]), for the caller's own ended context (its error), and,
// under [FailClosed] only, while the store is unavailable (wrapping
// [ErrUnavailable]).
func (l *Limiter) AllowN(ctx context.Context, key string, n int, limits ...Limit) (Result, error) {
	p, err := l.plans.get(limits)
	if err != nil {
		return Result{}, err
	}
	res, _, err := l.decide(ctx, key, p, n, 0)
	return res, err
}

// Wait reserves n tokens on key under limits and sleeps until they are due.
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
	res, d, err := l.decide(ctx, key, p, n, maxWait)
	if err != nil || !res.Allowed || d.wait == 0 {
		return res, err
	}
	t := time.NewTimer(time.Duration(d.wait) * time.Microsecond)
	defer t.Stop()
	select {
	case <-t.C:
		return res, nil
	case <-ctx.Done():
		return res, ctx.Err()
	}
}

// decide validates a request and decides it: from the deny cache, the
// store, or, when the store is unavailable, under the failure policy.
func (l *Limiter) decide(ctx context.Context, key string, p *plan, n int, maxWait int64) (Result, decision, error) {
	if key == "" {
		return Result{}, decision{}, fmt.Errorf("core: empty key: %w", keyfunc.ErrNoKey)
	}
	if n < 1 {
		return Result{}, decision{}, fmt.Errorf("%w: cost must be at least 1, got %d", ErrInvalidLimit, n)
	}
	if int64(n) > p.minB {
		return Result{}, decision{}, fmt.Errorf("%w: cost %d exceeds Burst %d; such a request could never be admitted", ErrInvalidLimit, n, p.minB)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, decision{}, err
	}
	now := l.now()
	cost := int64(n)

	if l.store == nil {
		d := l.local.decide(p.id, key, now, p.ticks, cost, maxWait, l.penalty)
		return l.done(d, p, SourceStore, false)
	}

	if l.denies != nil && cost == 1 && maxWait == 0 {
		dn, st, ch := l.denies.check(p.id, key, now)
		if st == denyWait {
			// Another request is asking Redis about this key; its
			// answer is ours too, unless it leaves the key open.
			select {
			case <-ch:
			case <-ctx.Done():
				return Result{}, decision{}, ctx.Err()
			}
			// Time has passed while waiting: judge the answer at the
			// present, or a stale clock would deny what Redis admits.
			now = l.now()
			dn, st, ch = l.denies.check(p.id, key, now)
		}
		switch st {
		case denyHit:
			d := decision{retry: dn.until - now, reset: max(0, dn.reset-now), locked: dn.locked, index: dn.index}
			return l.done(d, p, SourceDenyCache, false)
		case denyProbe:
			defer l.denies.release(p.id, key, ch)
		}
	}

	var storeErr error
	c := call{key: key, rkey: redisKey(l.prefix, p.fp, key), plan: p, cost: cost, maxWait: maxWait, penalty: l.penalty}
	brk := &l.brk
	if l.nodes != nil {
		brk = l.nodes.forKey(ctx, c.rkey)
	}
	if r := brk.route(now); r != viaLocal {
		d, err := l.callStore(ctx, &c)
		if err == nil {
			if brk.success(r) {
				l.recovered(brk, now)
			}
			if d.allowed {
				l.local.charge(p.id, key, now, p.local, cost)
			}
			if l.denies != nil && d.next > 0 && (!d.allowed || l.penalty == 0) {
				// Redis said when a unit request can next pass. Counted
				// from when this request was sent, that never outlasts
				// Redis's own answer. With a penalty lock, only denials
				// are cached: the first denial must reach Redis to lock.
				l.denies.put(p.id, key, now, denial{until: now + d.next, reset: now + d.reset, locked: d.locked && !d.allowed, index: d.index})
			}
			return l.done(d, p, SourceStore, false)
		}
		if cerr := callerGone(ctx); cerr != nil {
			// The caller gave up; that says nothing about the store.
			brk.abandon(r, now)
			return Result{}, decision{}, cerr
		}
		storeErr = err
		if brk.failure(r, now) {
			l.degrade(brk, now, err)
		}
	}
	brk.degraded.Add(1)
	return l.fallback(key, p, now, cost, maxWait, storeErr)
}

// callerGone returns the caller's context error, also when its deadline has
// passed but its timer has not fired yet: the socket deadline go-redis sets
// from it can fire first.
func callerGone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// callStore asks the store within the limiter's time budget: by the
// caller's deadline or the budget's end, whichever is sooner. The deadline
// is passed down as a value; a context carrying it is made only for the
// round trip itself (one per batch), not per decision.
func (l *Limiter) callStore(ctx context.Context, c *call) (decision, error) {
	var dl time.Time
	if l.timeout > 0 {
		dl = time.Now().Add(l.timeout)
	}
	if cdl, ok := ctx.Deadline(); ok && (dl.IsZero() || cdl.Before(dl)) {
		dl = cdl
	}
	var start time.Time
	if l.obs != nil {
		start = time.Now()
	}
	d, err := l.store.decide(ctx, dl, c)
	if l.obs != nil && callerGone(ctx) == nil {
		l.obs.ObserveStore(time.Since(start), err)
	}
	return d, err
}

// within returns ctx bounded by dl (zero for none). It allocates only when
// dl is sooner than ctx's own deadline.
func within(ctx context.Context, dl time.Time) (context.Context, context.CancelFunc) {
	if dl.IsZero() {
		return ctx, func() {}
	}
	if cdl, ok := ctx.Deadline(); ok && !dl.Before(cdl) {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, dl)
}

// fallback decides without the store, under the failure policy.
func (l *Limiter) fallback(key string, p *plan, now, cost, maxWait int64, cause error) (Result, decision, error) {
	switch l.policy {
	case FailOpen:
		return l.done(decision{allowed: true, remaining: -1}, p, SourceFailOpen, true)
	case FailClosed:
		if l.obs != nil {
			l.obs.ObserveDecision(Result{}, SourceFailClosed)
		}
		if cause == nil {
			cause = errors.New("circuit open after repeated store failures")
		}
		return Result{}, decision{}, fmt.Errorf("%w: %w", ErrUnavailable, cause)
	}
	// A request may cost more than a replica's share of the burst; it
	// then takes the whole share, rather than being denied for as long
	// as the outage lasts.
	d := l.local.decide(p.id, key, now, p.local, min(cost, p.localMinB), maxWait, l.penalty)
	res, d, err := l.done(d, p, SourceFallback, true)
	res.Limit = p.localLimits[d.index] // the limit actually enforced
	return res, d, err
}

// done turns a decision into a Result and reports it.
func (l *Limiter) done(d decision, p *plan, src Source, degraded bool) (Result, decision, error) {
	res := d.result(p)
	res.Degraded = degraded
	if d.remaining < 0 { // fail-open: nothing was counted
		res.Remaining = res.Limit.Burst
	}
	if l.obs != nil {
		l.obs.ObserveDecision(res, src)
	}
	return res, d, nil
}

func (l *Limiter) log() *slog.Logger {
	if l.logger != nil {
		return l.logger
	}
	return slog.Default()
}

// degrade records the start of an outage of brk's node.
func (l *Limiter) degrade(brk *breaker, now int64, err error) {
	if !brk.outageStart.CompareAndSwap(0, now) {
		return
	}
	brk.degraded.Store(0)
	attrs := []any{"policy", l.policy.String(), "error", err}
	if brk.node != "" {
		attrs = append(attrs, "node", brk.node)
	}
	if l.warnFallback {
		attrs = append(attrs, "warning", "the fallback enforces every limit in full on each replica; size it with core.WithFallbackReplicas")
	}
	l.log().Warn("sluice: store unavailable, deciding under the failure policy", attrs...)
	if l.obs != nil {
		l.obs.ObserveDegraded(err)
	}
}

// recovered records the end of an outage of brk's node.
func (l *Limiter) recovered(brk *breaker, now int64) {
	start := brk.outageStart.Swap(0)
	if start == 0 {
		return
	}
	outage := time.Duration(now-start) * time.Microsecond
	attrs := []any{"outage", outage, "degraded_decisions", brk.degraded.Load()}
	if brk.node != "" {
		attrs = append(attrs, "node", brk.node)
	}
	l.log().Info("sluice: store recovered", attrs...)
	if l.obs != nil {
		l.obs.ObserveRecovered(outage)
	}
}
