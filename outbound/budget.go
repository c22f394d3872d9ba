package outbound

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/overrides"
)

// ErrLimited is wrapped by the error of a call the budget refused: it
// was not sent. errors.As finds a [*LimitedError] with its details.
var ErrLimited = errors.New("outbound: call refused by the rate limit")

// LimitedError is the error of a call the budget refused.
type LimitedError struct {
	// Key is the upstream key the call was for.
	Key string
	// RetryAfter is how long until the budget could take the call.
	RetryAfter time.Duration
	// Paused is set when an upstream's pause refused the call.
	Paused bool
}

// Error says why the call was refused.
func (e *LimitedError) Error() string {
	why := "the budget is spent"
	if e.Paused {
		why = "the upstream asked for a pause"
	}
	return fmt.Sprintf("%s: %q: %s; retry after %s", ErrLimited, e.Key, why, e.RetryAfter)
}

// Unwrap returns ErrLimited.
func (e *LimitedError) Unwrap() error { return ErrLimited }

func errorf(format string, args ...any) error {
	return fmt.Errorf("outbound: "+format, args...)
}

// maxKeys bounds the upstream keys whose learned limits and pauses a
// Budget remembers; past it, new keys are decided under the configured
// limit alone (their pauses still reach Redis).
const maxKeys = 4096

// Budget is the fleet-wide budget of calls to upstreams under one
// configured limit: a token bucket per upstream key, shared by every
// replica through the limiter's Redis, lowered by what upstreams say.
// Make one with [New]; its zero value is not usable. It is safe for
// concurrent use; [Budget.Close] stops the goroutine that keeps its
// copy of the limits learned across the fleet current.
type Budget struct {
	lim    *core.Limiter
	limit  core.Limit
	base   *core.Rule
	o      options
	shared *overrides.Set // the learned limits, by key, of every replica

	mu    sync.Mutex
	keys  map[string]*upstream // learned limits and pauses, by key
	rules map[core.Limit]*core.Rule

	counts   counters
	policies policyMemo // the last RateLimit-Policy field read
}

// upstream is what this replica learned of one upstream key; b.mu guards
// it.
type upstream struct {
	rule    *core.Rule    // the lowered limit's; nil: the configured one's
	limit   core.Limit    // the lowered limit this replica learned last
	paused  time.Time     // the end of the last pause written for it
	turn    chan struct{} // held by the one waiter asking the limiter (see Take)
	writing bool          // a write of the learned limit to the shared set is under way
	retry   time.Time     // after a failed write, when to try again
}

// New returns a Budget taking from lim's buckets under limit, a
// continuous or stepped limit of calls (the most any upstream key may
// have; upstreams may lower it, see the package doc). It returns an error
// for a nil limiter, an invalid limit or option. It does no I/O itself,
// but starts the goroutine that reads the limits other replicas learned
// (see [Budget.Close]).
func New(lim *core.Limiter, limit core.Limit, opts ...Option) (*Budget, error) {
	if lim == nil {
		return nil, errorf("nil limiter")
	}
	o := defaultOptions()
	for i, opt := range opts {
		if opt == nil {
			return nil, errorf("option %d of %d is nil", i, len(opts))
		}
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	b := &Budget{lim: lim, limit: limit, o: o, keys: map[string]*upstream{}, rules: map[core.Limit]*core.Rule{}}
	base, err := b.prepare(limit)
	if err != nil {
		return nil, err
	}
	b.base = base
	if b.shared, err = overrides.New(lim, sharedName(o.name), overrides.WithMax(maxKeys)); err != nil {
		return nil, fmt.Errorf("outbound: %w", err)
	}
	return b, nil
}

// sharedName is the name of the override set that holds the limits
// learned by the budgets named name.
func sharedName(name string) string { return "outbound:" + name }

// Close stops the goroutine that keeps this replica's copy of the limits
// learned by the fleet current, and waits for it. A closed budget still
// takes calls, under what it learned until then. Close is safe to call
// more than once and returns nil.
func (b *Budget) Close() error { return b.shared.Close() }

// prepare returns the rule of limit in the budget's scope, with token
// leases if they apply.
func (b *Budget) prepare(limit core.Limit) (*core.Rule, error) {
	r, err := b.lim.PrepareScoped("outbound:"+b.o.name, limit)
	if err != nil {
		return nil, fmt.Errorf("outbound: %w", err)
	}
	if b.o.leases && limit.Refill == core.RefillContinuous {
		if lr, err := r.WithTokenLeases(core.LeaseBound{Fraction: 0.25}); err == nil {
			r = lr // a burst too small for leases is decided without them
		}
	}
	return r, nil
}

// Limit returns the limit key is decided under on this replica: the
// configured one, or the lower one an upstream announced, to this
// replica or to another one of the fleet.
func (b *Budget) Limit(key string) core.Limit {
	l, _ := b.current(key)
	return l
}

// rule returns the rule key is decided under.
func (b *Budget) rule(key string) *core.Rule {
	_, r := b.current(key)
	return r
}

// current returns the limit key is decided under and its rule: the
// configured limit lowered by what this replica learned of key and by
// what the fleet learned (the shared set), never raised.
func (b *Budget) current(key string) (core.Limit, *core.Rule) {
	l := b.limit
	if o, ok := b.shared.Lookup(key); ok {
		for _, x := range o.Limits {
			l, _ = lowered(l, x)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if u := b.keys[key]; u != nil && u.rule != nil {
		if l == b.limit {
			return u.limit, u.rule
		}
		l, _ = lowered(l, u.limit)
	}
	if l == b.limit {
		return l, b.base
	}
	if r := b.rules[l]; r != nil {
		return l, r
	}
	r, err := b.prepare(l)
	if err != nil {
		return b.limit, b.base // cannot happen: lowered makes valid limits
	}
	if len(b.rules) < maxKeys {
		b.rules[l] = r
	}
	return l, r
}

// Take takes one call to key from the budget: at once, or after waiting
// within ctx for the budget to have it (unless [WithFailFast]). It
// returns nil when the call may be sent; an error wrapping [ErrLimited]
// when the budget refused it (fail fast, or ctx's deadline comes before
// the budget has it); ctx's error if it ended during the wait; and an
// error wrapping [core.ErrUnavailable] when the limiter fails closed and
// Redis is unavailable.
//
// The calls of one key that wait on this replica wait in turn, in the
// order they came: one asks the limiter at a time, so that a token
// coming free wakes one caller, not all of them.
func (b *Budget) Take(ctx context.Context, key string) error {
	res, err := b.rule(key).Allow(ctx, key)
	if err != nil || res.Allowed {
		return b.taken(err, 0, false)
	}
	if b.o.failFast {
		return b.refuse(key, res)
	}
	start, paused := time.Now(), res.Locked
	if turn := b.turn(key); turn != nil {
		select {
		case turn <- struct{}{}:
			defer func() { <-turn }()
		case <-ctx.Done():
			return ctx.Err()
		}
		// The turn may come long after the denial: ask again.
		if res, err = b.rule(key).Allow(ctx, key); err != nil || res.Allowed {
			return b.taken(err, time.Since(start), paused)
		}
		paused = paused || res.Locked
	}
	for {
		d := max(res.RetryAfter, time.Millisecond)
		if tooLate(ctx, d) {
			return b.refuse(key, res)
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		if res, err = b.rule(key).Allow(ctx, key); err != nil || res.Allowed {
			return b.taken(err, time.Since(start), paused)
		}
		paused = paused || res.Locked
	}
}

// taken ends a Take that the limiter answered with err, or admitted
// after waiting for waited (paused: an upstream's pause made it wait).
func (b *Budget) taken(err error, waited time.Duration, paused bool) error {
	if err != nil {
		return err
	}
	b.counts.sent.Add(1)
	if waited > 0 {
		b.observe(Waited, waited, paused)
	}
	return nil
}

// refuse ends a Take the budget refused with the denial res.
func (b *Budget) refuse(key string, res core.Result) error {
	b.observe(Refused, res.RetryAfter, res.Locked)
	return &LimitedError{Key: key, RetryAfter: res.RetryAfter, Paused: res.Locked}
}

// turn returns the channel that waiters of key take turns on; nil when
// there is no room to remember key.
func (b *Budget) turn(key string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.entry(key)
	if u == nil {
		return nil
	}
	if u.turn == nil {
		u.turn = make(chan struct{}, 1)
	}
	return u.turn
}

// tooLate reports whether ctx ends before d has passed.
func tooLate(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < d
}

// Pause pauses every replica's calls to key for d (at most
// [WithMaxPause]): the upstream asked for it. It writes the pause to
// Redis ([core.Rule.Lock]) unless this replica wrote one that lasts as
// long already, and returns the error of that write (the pause then holds
// on this replica alone). A d below a millisecond does nothing.
func (b *Budget) Pause(ctx context.Context, key string, d time.Duration) error {
	d = min(d, b.o.maxPause)
	if d < time.Millisecond {
		return nil
	}
	end := time.Now().Add(d)
	b.mu.Lock()
	u := b.entry(key)
	if u != nil && !u.paused.Before(end.Add(-pauseSlack)) {
		b.mu.Unlock()
		return nil // a pause written here lasts (nearly) as long
	}
	if u != nil {
		u.paused = end
	}
	b.mu.Unlock()
	rules := []*core.Rule{b.base}
	if r := b.rule(key); r != b.base {
		rules = append(rules, r)
	}
	b.observe(Paused, d, true)
	// The pause outlives the call that brought it: the caller's
	// cancellation must not lose it.
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for _, r := range rules {
		if _, err := r.Lock(ctx, key, d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// entry returns key's state, made if there is room; nil if not. b.mu is
// held.
func (b *Budget) entry(key string) *upstream {
	if u := b.keys[key]; u != nil {
		return u
	}
	if len(b.keys) >= maxKeys {
		return nil
	}
	u := &upstream{}
	b.keys[key] = u
	return u
}

// learn makes next, the limit key's upstream announced (the configured
// limit lowered by what it said; the configured one when it said nothing
// lower), what this replica learned of key, and writes it to the shared
// set unless the set holds it already, so that every replica decides key
// under it: a limit lower than the configured one is set, the configured
// one removes the key's entry. So a learned limit stands until an
// upstream's response announces another, on any replica.
//
// The replica that writes a lower limit takes its burst from the limit's
// bucket, which is new (its limits name it) and full, since the calls
// sent before count against the upstream's quota too; the replicas that
// read it from the set find the bucket so. If the write fails (Redis is
// unavailable, or the set is full), the limit holds on this replica
// alone, which takes the burst itself, and the write is tried again by
// a response a second later or more.
func (b *Budget) learn(ctx context.Context, key string, next core.Limit) {
	o, had := b.shared.Lookup(key)
	inSet := had && len(o.Limits) == 1 && o.Limits[0] == next
	now := time.Now()
	b.mu.Lock()
	u := b.entry(key)
	if u == nil {
		b.mu.Unlock()
		return
	}
	b.keepLocal(u, next)
	if inSet || !had && next == b.limit || u.writing || now.Before(u.retry) {
		b.mu.Unlock()
		return
	}
	u.writing = true
	b.mu.Unlock()

	ctx = context.WithoutCancel(ctx) // what the upstream said outlives the call
	var err error
	if next == b.limit {
		err = b.shared.Remove(ctx, key)
	} else {
		err = b.shared.Set(ctx, key, overrides.Override{Limits: []core.Limit{next}})
	}
	b.mu.Lock()
	u.writing = false
	first := u.retry.IsZero() // not a write tried again
	if err != nil {
		u.retry = now.Add(time.Second)
	} else {
		u.retry = time.Time{}
	}
	r := b.rules[next]
	b.mu.Unlock()
	if next != b.limit && r != nil && (err == nil || first) {
		_, _ = r.AllowN(ctx, key, next.Burst)
	}
}

// keepLocal makes next what this replica learned of key, u, counting a
// change to a limit lower than the configured one. b.mu is held.
func (b *Budget) keepLocal(u *upstream, next core.Limit) {
	if next == b.limit {
		u.rule = nil
		return
	}
	if u.rule != nil && u.limit == next {
		return
	}
	r := b.rules[next]
	if r == nil {
		var err error
		if r, err = b.prepare(next); err != nil {
			return // cannot happen: lowered makes valid limits
		}
		if len(b.rules) < maxKeys {
			b.rules[next] = r
		}
	}
	u.rule, u.limit = r, next
	b.counts.lowered.Add(1)
}

// announced returns the limit a response's advice a makes of the
// configured limit: lowered by its policy and by its burst, never raised.
func (b *Budget) announced(a advice) core.Limit {
	l := b.limit
	if a.policy.Rate > 0 {
		l, _ = lowered(l, a.policy)
	}
	if a.burst > 0 {
		x := l
		x.Burst = a.burst
		l, _ = lowered(l, x)
	}
	return l
}

// lowered returns cur with its rate and burst lowered to l's where l's
// are lower, and whether anything changed. Only a continuous cur is
// lowered: a stepped one keeps its windows.
func lowered(cur, l core.Limit) (core.Limit, bool) {
	if cur.Refill != core.RefillContinuous || l.Refill != core.RefillContinuous || l.Rate < 1 || l.Period <= 0 || l.Burst < 1 {
		return cur, false
	}
	next, changed := cur, false
	if slower(l, cur) {
		next.Rate, next.Period, changed = l.Rate, l.Period, true
	}
	if l.Burst < cur.Burst {
		next.Burst, changed = l.Burst, true
	}
	return next, changed
}

// slower reports whether a's rate, Rate per Period, is below b's.
func slower(a, b core.Limit) bool {
	x := new(big.Int).Mul(big.NewInt(int64(a.Rate)), big.NewInt(int64(b.Period)))
	y := new(big.Int).Mul(big.NewInt(int64(b.Rate)), big.NewInt(int64(a.Period)))
	return x.Cmp(y) < 0
}

// pauseSlack is how much earlier than a new pause's end a pause written
// here may end and still stand for it: the 429s of concurrent calls ask
// for pauses ending within a few milliseconds, and one write is enough.
const pauseSlack = 50 * time.Millisecond
