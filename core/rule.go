package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Rule is a set of limits compiled once and bound to the [Limiter] that
// made it: the limits' validation, fingerprint and script arguments are
// done when it is prepared, not on each call. Its methods are those of the
// Limiter without the limits argument, and decide exactly as the Limiter's
// do with the same limits (the same buckets in Redis).
//
// Prepare a Rule where the limits are known ahead, such as a middleware or
// a login handler:
//
//	login, err := lim.Prepare(core.PerMinute(5), core.PerHour(20))
//	...
//	res, err := login.Allow(ctx, "user:"+id)
//
// A Rule is safe for concurrent use and needs no closing. Its zero value is
// not usable; get one from [Limiter.Prepare].
type Rule struct {
	lim *Limiter
	p   *plan
}

// Prepare validates and compiles limits, checked and consumed together on
// each key, into a [Rule]. It returns an error wrapping [ErrInvalidLimit]
// for no limits, more than eight, or an invalid one.
func (l *Limiter) Prepare(limits ...Limit) (*Rule, error) {
	p, err := l.plans.get(limits)
	if err != nil {
		return nil, err
	}
	return &Rule{lim: l, p: p}, nil
}

// PrepareScoped is [Limiter.Prepare] in a named scope: the rule's buckets
// are apart from those of the same key under the same limits in any other
// scope, and shared with every rule of the same scope and limits on a
// limiter with the same prefix, in this process or another. The scope is
// hashed into the keys' fingerprint, so it may be any text; the empty
// scope is Prepare's.
//
// Middleware names its buckets with it: a middleware given WithScope(x)
// draws on the buckets of PrepareScoped(x, limits...) (its main limit
// first, then those of its WithLimits), and one without counts in the
// scope of the request's route, such as "route:GET /login" (see package
// policy). Call it directly to share a middleware's buckets, or where two
// uses of one limit must not draw on one bucket:
//
//	search, err := lim.PrepareScoped("search", core.PerMinute(60))
//	export, err := lim.PrepareScoped("export", core.PerMinute(60))
func (l *Limiter) PrepareScoped(scope string, limits ...Limit) (*Rule, error) {
	if scope == "" {
		return l.Prepare(limits...)
	}
	p, err := l.plans.compileScoped(scope, limits)
	if err != nil {
		return nil, err
	}
	return &Rule{lim: l, p: p}, nil
}

// DryRun returns a rule with the same limits, scope and buckets whose
// decisions are made, charged and observed as usual but marked
// [Result.DryRun]: the caller means to let every request through whatever
// the result says, to try a limit on live traffic. Observers see the mark,
// so metrics can tell would-be denials from real ones. The rule itself is
// unchanged.
func (r *Rule) DryRun() (*Rule, error) {
	p, err := r.lim.plans.compileScoped(r.p.scope, r.p.limits)
	if err != nil {
		return nil, err
	}
	p.modesOf(r.p)
	p.dryRun = true
	return &Rule{lim: r.lim, p: p}, nil
}

// WithPenalty returns a rule with the same limits, scope, dry run, canary
// ([Rule.WithEnforce]) and buckets whose denials lock the key for d, as the limiter's [WithPenalty]
// does for every rule: a login rule can lock a key for a quarter of an hour
// on an engine whose other rules lock nothing, or the reverse. Zero means
// no lock, whatever the limiter's option says. The lock is the key's, in
// its bucket: a rule of the same scope and limits without the penalty is
// denied while the lock holds, as every rule on the key is. The rule
// itself is unchanged. WithPenalty returns an error for a negative d or one
// above [MaxPenalty].
func (r *Rule) WithPenalty(d time.Duration) (*Rule, error) {
	if d < 0 || d > MaxPenalty {
		return nil, fmt.Errorf("core: Rule.WithPenalty: %s is not from 0 to %s", d, MaxPenalty)
	}
	p, err := r.lim.plans.compileScoped(r.p.scope, r.p.limits)
	if err != nil {
		return nil, err
	}
	p.modesOf(r.p)
	p.penalty = micros(d)
	return &Rule{lim: r.lim, p: p}, nil
}

// Limits returns a copy of the rule's limits, in the order they were
// given.
func (r *Rule) Limits() []Limit { return append([]Limit(nil), r.p.limits...) }

// Allow is shorthand for [Rule.AllowN] with a cost of 1.
func (r *Rule) Allow(ctx context.Context, key string) (Result, error) {
	var o outcome
	err := r.lim.admit(ctx, key, r.p, 1, 0, &o)
	return o.res, err
}

// AllowN is [Limiter.AllowN] under the rule's limits.
func (r *Rule) AllowN(ctx context.Context, key string, n int) (Result, error) {
	var o outcome
	err := r.lim.admit(ctx, key, r.p, n, 0, &o)
	return o.res, err
}

// Wait is [Limiter.Wait] under the rule's limits.
func (r *Rule) Wait(ctx context.Context, key string, n int) (Result, error) {
	return r.lim.wait(ctx, key, r.p, n)
}

// Peek is [Limiter.Peek] under the rule's limits.
func (r *Rule) Peek(ctx context.Context, key string) (Result, error) {
	return r.lim.peek(ctx, key, r.p)
}

// Reset is [Limiter.Reset] under the rule's limits.
func (r *Rule) Reset(ctx context.Context, key string) error {
	return r.lim.reset(ctx, key, r.p)
}

// errEmptyKey is returned for an empty key: every key must name something.
// Key functions report a missing key with their own error before the
// limiter is called.
var errEmptyKey = errors.New("core: empty key")
