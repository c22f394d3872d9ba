package outbound

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
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
// concurrent use and needs no closing.
type Budget struct {
	lim   *core.Limiter
	limit core.Limit
	base  *core.Rule
	o     options

	mu    sync.Mutex
	keys  map[string]*upstream // learned limits and pauses, by key
	rules map[core.Limit]*core.Rule

	counts   counters
	policies policyMemo // the last RateLimit-Policy field read
}

// upstream is what this replica learned of one upstream key; b.mu guards
// it.
type upstream struct {
	rule   *core.Rule    // the lowered limit's; nil: the configured one's
	limit  core.Limit    // the lowered limit
	paused time.Time     // the end of the last pause written for it
	turn   chan struct{} // held by the one waiter asking the limiter (see Take)
}

// New returns a Budget taking from lim's buckets under limit, a
// continuous or stepped limit of calls (the most any upstream key may
// have; upstreams may lower it, see the package doc). It returns an error
// for a nil limiter, an invalid limit or option, and does no I/O.
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
	return b, nil
}

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
// configured one, or the lower one an upstream announced.
func (b *Budget) Limit(key string) core.Limit {
	b.mu.Lock()
	defer b.mu.Unlock()
	if u := b.keys[key]; u != nil && u.rule != nil {
		return u.limit
	}
	return b.limit
}

// rule returns the rule key is decided under.
func (b *Budget) rule(key string) *core.Rule {
	b.mu.Lock()
	defer b.mu.Unlock()
	if u := b.keys[key]; u != nil && u.rule != nil {
		return u.rule
	}
	return b.base
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
	rules := []*core.Rule{b.base}
	if u != nil && u.rule != nil {
		rules = append(rules, u.rule)
	}
	b.mu.Unlock()
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

// lower decides key under l from now on where l is lower than what key
// is decided under (the configured limit, or a lower one learned
// before), and reports whether it did. A higher limit changes nothing.
// The lower limit's bucket is new (its limits name it), and full: lower
// takes its burst (when it has it), since the calls this replica sent
// before count against the upstream's quota too. Each replica does so
// once, as it learns the limit, which costs the fleet at most a burst of
// the lower limit per replica.
func (b *Budget) lower(ctx context.Context, key string, l core.Limit) bool {
	cur := b.Limit(key)
	next, lower := lowered(cur, l)
	if !lower {
		return false
	}
	b.mu.Lock()
	r := b.rules[next]
	b.mu.Unlock()
	if r == nil {
		var err error
		if r, err = b.prepare(next); err != nil {
			return false
		}
	}
	if !b.use(key, next, r) {
		return false
	}
	_, _ = r.AllowN(context.WithoutCancel(ctx), key, next.Burst)
	return true
}

// use decides key under next, whose rule is r, unless key is decided
// under a limit as low already; it reports whether it changed.
func (b *Budget) use(key string, next core.Limit, r *core.Rule) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.rules) < maxKeys {
		b.rules[next] = r
	}
	u := b.entry(key)
	if u == nil {
		return false
	}
	if u.rule != nil {
		if _, still := lowered(u.limit, next); !still {
			return false // another call lowered it as far
		}
	}
	u.rule, u.limit = r, next
	b.counts.lowered.Add(1)
	return true
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
