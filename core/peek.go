package core

import (
	"context"
	"time"
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
	res := resultOf(d, p)
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
