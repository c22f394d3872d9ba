package core

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core/internal/model"
)

// Peek reports what a request of cost 1 on key would get now under limits,
// without taking anything and without writing: Allowed says whether it
// would be admitted, Remaining how many such requests could pass,
// RetryAfter (when not allowed) how long until one could, ResetAfter when
// the buckets are full again, Locked whether a penalty lock holds the key.
// Use it for a quota endpoint or an operator's tool; a request that will
// be served should call [Limiter.Allow], which decides and charges in one
// step (a Peek followed by an Allow is two calls, and the answer may change
// between them).
//
// Peek asks Redis every time, in one script call that writes nothing; the
// deny cache is neither consulted nor filled, and Observer sees the store
// call but no decision. Peek never degrades: when the store cannot answer
// (or its breaker is open) it returns an error wrapping [ErrUnavailable]
// rather than a guess. It returns an error for an empty key or invalid
// limits, and the caller's context error.
func (l *Limiter) Peek(ctx context.Context, key string, limits ...Limit) (Result, error) {
	p, err := l.plans.get(limits)
	if err != nil {
		return Result{}, err
	}
	return l.peek(ctx, key, p)
}

// peek is Peek with a compiled plan.
func (l *Limiter) peek(ctx context.Context, key string, p *plan) (Result, error) {
	if key == "" {
		return Result{}, errEmptyKey
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	now := l.now()
	d, na := l.store.Peek(ctx, key, &p.Plan, now)
	if na != nil {
		return Result{}, unanswered(na, "peek", key)
	}
	return peekResult(d, p), nil
}

// peekResult turns the decision on a request of cost 0 into the Result of
// a request of cost 1: it passes if it need not wait.
func peekResult(d decision, p *plan) Result {
	res := resultOf(&d, p)
	res.Allowed = d.Allowed && d.Next == 0
	res.RetryAfter, res.Wait = 0, 0
	if !res.Allowed {
		res.RetryAfter = time.Duration(d.Next) * time.Microsecond
	}
	return res
}

// peek decides a request of cost 0 on a copy of key's bucket: nothing is
// inserted or changed.
func (s *localStore) peek(id uint64, key string, now int64, ticks []tickLimit) decision {
	k := makeLocalKey(id, key)
	sh := s.m.shard(k)
	var buf [maxLimits]tat
	var b bucket
	sh.mu.Lock()
	if e := s.m.entry(sh, k, now, false); e != nil {
		b = e.b
		b.tats = buf[:copy(buf[:], e.b.tats)]
	}
	sh.mu.Unlock()
	d, _ := stepBucket(&b, now, ticks, 0, 0, 0)
	return d
}

// MaxPeekKeys bounds the keys of one [Limiter.PeekMany].
const MaxPeekKeys = 10_000

// PeekMany is [Limiter.Peek] of many keys at once under the same limits:
// one Result per key, in order, each what Peek would report for it. It
// writes nothing. Redis is asked in one round trip per node: on one
// server a single script call for up to 256 keys (more go in further
// calls of the same pipeline), on a Cluster or Ring one call per hash tag,
// pipelined per master, the masters asked at once. NewMemory reads its
// own memory.
//
// It answers whole or not at all: when a node cannot answer (or its
// breaker is open), or a key's stored value cannot be read, it returns an
// error wrapping [ErrUnavailable] and no Result. It returns an error for
// more than [MaxPeekKeys] keys, an empty key (naming its index) or
// invalid limits, and the caller's context error. No keys: no Results and
// no error.
func (l *Limiter) PeekMany(ctx context.Context, keys []string, limits ...Limit) ([]Result, error) {
	p, err := l.plans.get(limits)
	if err != nil {
		return nil, err
	}
	return l.peekMany(ctx, keys, p)
}

// PeekMany is [Limiter.PeekMany] under the rule's limits.
func (r *Rule) PeekMany(ctx context.Context, keys []string) ([]Result, error) {
	return r.lim.peekMany(ctx, keys, r.p)
}

// peekMany is PeekMany with a compiled plan.
func (l *Limiter) peekMany(ctx context.Context, keys []string, p *plan) ([]Result, error) {
	if len(keys) > MaxPeekKeys {
		return nil, fmt.Errorf("core: PeekMany of %d keys, at most %d", len(keys), MaxPeekKeys)
	}
	for i, k := range keys {
		if k == "" {
			return nil, fmt.Errorf("%w (keys[%d])", errEmptyKey, i)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return []Result{}, nil
	}
	plans := make([]*model.Plan, len(keys))
	for i := range plans {
		plans[i] = &p.Plan
	}
	ds, err := l.store.PeekMany(ctx, &buckets{Plans: plans, Keys: keys, Now: l.now()})
	if err != nil {
		return nil, unanswered(err, "peek", fmt.Sprintf("%d keys from %s", len(keys), keys[0]))
	}
	res := make([]Result, len(ds))
	for i, d := range ds {
		res[i] = peekResult(d, p)
	}
	return res, nil
}

// Peek reports what a request of cost 1 on path would find at each of its
// levels now, writing nothing: one Result per key of path, root first,
// each what [Limiter.Peek] reports of that level's bucket alone (its
// Level set to the level's name, Remaining what the level has left). A
// path request is admitted only if every level would admit it, so the
// smallest Remaining is what the path has left. Redis reads every level
// in one script call (they share the root's slot).
//
// Peek never degrades, as Limiter.Peek does not: a store that cannot
// answer is an error wrapping [ErrUnavailable]. It returns an error for a
// path with no key, more keys than levels, or an empty key, and the
// caller's context error.
func (r *PathRule) Peek(ctx context.Context, path ...string) ([]Result, error) {
	b, err := r.buckets(path)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.Now = r.lim.now()
	ds, err := r.lim.store.PeekMany(ctx, b)
	if err != nil {
		return nil, unanswered(err, "peek", "path "+strings.Join(path, "/"))
	}
	res := make([]Result, len(ds))
	for i, d := range ds {
		res[i] = peekResult(d, r.plans[i])
		res[i].Level = r.names[i]
	}
	return res, nil
}

// Reset deletes the buckets of path's levels, root first, one per key of
// path: each level the path names starts full again (a calendar or
// interval quota too, before its next window). Levels below the path's
// last key are not touched: Reset of an organisation alone ("acme")
// empties the organisation's bucket and leaves its teams' and users' as
// they are; Reset of "acme", "eng" empties both the organisation's and
// that team's. The local fallback's buckets of those levels are emptied
// too. In Redis it is one script call.
//
// It returns an error wrapping [ErrUnavailable] when the store cannot
// answer, an error for a path with no key, more keys than levels, or an
// empty key, and the caller's context error.
func (r *PathRule) Reset(ctx context.Context, path ...string) error {
	b, err := r.buckets(path)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, key := range b.Keys {
		r.lim.local.delete(b.Plans[i].ID, key)
	}
	return unanswered(r.lim.store.ResetMany(ctx, b), "reset", "path "+strings.Join(path, "/"))
}

// buckets checks path and names its levels' buckets.
func (r *PathRule) buckets(path []string) (*buckets, error) {
	if len(path) == 0 || len(path) > len(r.plans) {
		return nil, fmt.Errorf("core: a path of %d keys for a rule of %d levels", len(path), len(r.plans))
	}
	b := &buckets{Plans: r.views[:len(path)], Keys: make([]string, len(path)), Root: path[0]}
	for i, k := range path {
		if k == "" {
			return nil, fmt.Errorf("core: the key of level %q is empty", r.names[i])
		}
		b.Keys[i] = pathKeyOf(path, i)
	}
	return b, nil
}
