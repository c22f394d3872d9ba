package core

import (
	"context"
	"fmt"
	"time"
)

// This file is the lock operation (Rule.Lock, kind OpLock on the one
// road): a key's penalty lock set for a time by the caller, not by a
// denial. Package outbound locks an upstream's key when the upstream
// answers with Retry-After, so that every replica's calls to it pause.

// Lock locks key under the rule's limits for d, on every replica, as a
// penalty lock does (see [WithPenalty]): until it ends, every decision on
// the key is denied, [Result.Locked] set and RetryAfter saying when the
// lock ends. A lock that ends later stays: Lock never shortens one, and
// it returns how long the key's lock lasts from now (d, or more). The
// key's tokens are unchanged, and the lock ends by itself; [Rule.Reset]
// lifts it sooner.
//
// This replica honours the lock at once: its deny cache, its local
// fallback and its token leases for the key (the hand it holds is not
// spent while the lock lasts). Another replica honours it at its next
// decision in Redis: a hand of tokens it holds from a lease is spent
// until that lease ends (half a second at most, see
// [Rule.WithTokenLeases]).
//
// Lock returns an error for an empty key, a d that is not from 1 µs to
// [MaxPenalty], the caller's context error, and, wrapping
// [ErrUnavailable], a store failure or an open breaker; then the lock
// holds on this replica alone (in its deny cache and local fallback). It
// is safe for concurrent use.
func (r *Rule) Lock(ctx context.Context, key string, d time.Duration) (time.Duration, error) {
	l, p := r.lim, r.p
	if key == "" {
		return 0, errEmptyKey
	}
	if d < time.Microsecond || d > MaxPenalty {
		return 0, fmt.Errorf("core: Rule.Lock: %s is not from 1µs to %s", d, MaxPenalty)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now := l.now()
	left, err := l.store.Lock(ctx, &p.Plan, key, micros(d), now)
	if err != nil {
		if _, gone := split(err); gone != nil {
			return 0, gone
		}
		left = micros(d)
	}
	l.lockedHere(p, key, now, left)
	return time.Duration(left) * time.Microsecond, unanswered(err, "lock", key)
}

// lockedHere makes this replica honour a lock of key under p lasting
// left microseconds from now: the deny cache answers for it, the local
// fallback is locked, and a hand of leased tokens is not spent.
func (l *Limiter) lockedHere(p *plan, key string, now, left int64) {
	until := now + left
	if l.denies != nil {
		l.denies.put(p.ID, key, now, denial{until: until, expires: now + min(left, denyMaxAge), reset: until, locked: true})
	}
	if l.remote {
		l.local.lock(p.ID, key, now, l.share(p).ticks, until)
	}
	if p.lease != nil {
		if hk := l.hotLeases().get(p, key, now); hk != nil {
			hk.mu.Lock()
			hk.noLease = max(hk.noLease, until)
			hk.mu.Unlock()
		}
	}
}
