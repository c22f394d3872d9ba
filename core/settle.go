package core

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/internal/model"
)

// SettleWindow is how long after [Rule.Reserve] a reservation may be
// settled. A reservation not settled by then (its process died, or its
// caller forgot) stands as reserved: its cost stays charged, which is
// what the bucket already holds, so nothing leaks and nothing is charged
// twice. [Reservation.Settle] after the window changes nothing and returns
// an error wrapping [ErrSettled].
const SettleWindow = 10 * time.Minute

// markerMargin is how long Redis keeps a settled reservation's marker
// beyond the end of its settle window: a retry of the settling call
// (go-redis's own, within the call's time budget, or the caller's, within
// the window) finds it and changes nothing.
const markerMargin = time.Minute

// ErrSettled is returned (wrapped) by [Reservation.Settle] and
// [Reservation.Cancel] for a reservation settled already (by an earlier
// call, maybe one that reported an error after Redis applied it), being
// settled by a concurrent call, or past its [SettleWindow]. Nothing is
// changed; the earlier settlement, or the reserved cost, stands.
var ErrSettled = errors.New("core: reservation already settled")

// settleVia says where a reservation is settled.
type settleVia uint8

const (
	settleNothing settleVia = iota // denied, fail-open: nothing was charged
	settleStore                    // charged by the limiter's store (see store.settle)
	settleLocal                    // charged by the local fallback, while the store was unavailable
)

// Reservation is an admitted (or denied) request whose cost is not known
// yet: [Rule.Reserve] charged its estimate, and [Reservation.Settle]
// charges its final cost instead. A Reservation is safe for concurrent use;
// it settles at most once. Its zero value has nothing to settle.
type Reservation struct {
	// Result is the reservation's decision, exactly that of
	// [Rule.AllowN] with the same cost.
	Result Result

	lim   *Limiter
	p     *plan
	key   string
	n     int64       // the cost reserved
	via   settleVia   // where it is settled
	ticks []tickLimit // in memory: the limits it was charged under
	held  int64       // the cost charged (the fallback caps it at its share's Burst)
	id    string      // in Redis: names the marker
	made  time.Time   // when it was made, on the monotonic clock
	at    int64       // when it was made, on the limiter's clock: a stepped limit's window
	path  *pathSettle // a path's reservation (see PathRule.Reserve); nil: a key's
	state atomic.Int32
}

// Reservation states.
const (
	rsOpen     = iota // not settled
	rsSettling        // a Settle is in flight
	rsSettled         // settled, or cancelled
)

// Reserve decides a request of estimated cost n on key exactly as
// [Rule.AllowN] does (the same buckets, batching, deny cache and failure
// policy) and returns a [Reservation] holding the decision. An admitted
// reservation has charged n; settle it with the request's final cost when
// that is known. A denied one charged nothing and has nothing to settle.
// Errors are those of AllowN.
//
// A limit with an interval or calendar refill (see [Refill]) is settled
// in the window the reservation was made in, even when Settle comes after
// that window ended: the final cost is that window's (a monthly quota
// charged by the tokens a request used is charged in the month it was
// admitted). What a charge takes beyond the window's quota carries into
// the next windows, as a stepped limit's debt does; a refund gives back
// only what the window had, never tokens of a later one. Once the key
// was charged in a later window, the earlier window is closed: settling
// changes nothing on that limit. In Redis the window is the one that
// held Redis's clock when the reservation was made, found from the time
// since on the limiter's clock.
func (r *Rule) Reserve(ctx context.Context, key string, n int) (*Reservation, error) {
	l := r.lim
	p := r.p
	if p.lease != nil {
		p = p.lease.exact // a reservation is decided exactly, without leases
	}
	at := l.now()
	var o outcome
	if err := l.admit(ctx, key, p, n, 0, &o); err != nil {
		return nil, err
	}
	res, d := o.res, o.d
	rv := &Reservation{Result: res, lim: l, p: p, key: key, n: int64(n), made: time.Now(), at: at}
	switch {
	case !res.Allowed:
	case res.Degraded && d.Remaining < 0: // FailOpen: nothing was counted
	case res.Degraded:
		sh := l.share(r.p)
		rv.via, rv.ticks, rv.held = settleLocal, sh.ticks, min(int64(n), sh.minB)
	default:
		rv.reserved()
	}
	return rv, nil
}

// reserved readies rv, which the store admitted, for its settlement there:
// in Redis, an id names its markers.
func (rv *Reservation) reserved() {
	rv.via, rv.held = settleStore, rv.n
	if rv.lim.remote {
		rv.id = newID()
	}
}

// Settle charges final instead of the reserved cost, atomically on every
// limit of the rule: it refunds what was not used (final below the
// reservation's cost), never filling a bucket beyond full, or charges the
// difference (final above it). A charge may take a bucket into debt, at
// most one Burst beyond empty (a debt a waiting reservation took further
// is not increased); later requests wait for the debt to refill. When
// several reservations overshoot at once, what goes beyond that debt is
// not charged.
// final may be 0 (see [Reservation.Cancel]) and at most the reserved cost
// plus the rule's smallest Burst; otherwise Settle returns an error
// wrapping [ErrInvalidLimit] and the reservation stays open.
//
// Settle is idempotent: a reservation is settled at most once, in this
// process and in Redis, where a marker in the bucket's slot makes a
// retried or duplicated call change nothing. A second Settle returns an
// error wrapping [ErrSettled]. A denied or fail-open reservation has
// nothing to settle: Settle returns nil.
//
// A reservation decided in Redis is settled in Redis, by one script call
// that concurrent settlements on the same node share as decisions do (see
// [WithBatching]; settlements have batches of their own, never mixed with
// decisions), bounded by the limiter's time budget, routed through the
// node's breaker and reported to the observer as every store call is
// (kind [OpSettle]), and not waited on by [WithReplicaAck]. If Redis
// cannot be reached (or the node's breaker is open), Settle returns an
// error wrapping
// [ErrUnavailable], the reserved cost stands and the reservation stays
// open: call Settle again (within [SettleWindow]). The local fallback's
// copy of the key is not adjusted. A reservation decided by the local
// fallback (the store was down) is settled in the local fallback, even
// once Redis is back; Redis never saw it. A refund ends this limiter's
// cached denial of the key (see [WithDenyCache]); a charge never extends
// one. Other replicas' cached denials end as usual, within a second.
func (rv *Reservation) Settle(ctx context.Context, final int) error {
	if rv.via == settleNothing {
		return nil
	}
	if final < 0 || int64(final) > rv.n+rv.p.minB {
		return fmt.Errorf("%w: final cost must be within [0, %d], got %d", ErrInvalidLimit, rv.n+rv.p.minB, final)
	}
	left := SettleWindow - time.Since(rv.made)
	if left < 0 {
		return fmt.Errorf("%w: its settle window (%s) has passed; the reserved cost stands", ErrSettled, SettleWindow)
	}
	if !rv.state.CompareAndSwap(rsOpen, rsSettling) {
		return ErrSettled
	}
	applied, err := rv.settle(ctx, int64(final), left+markerMargin)
	if err != nil {
		rv.state.Store(rsOpen)
		return err
	}
	rv.state.Store(rsSettled)
	if !applied {
		return ErrSettled
	}
	return nil
}

// Cancel is shorthand for [Reservation.Settle] with a final cost of 0: it
// refunds the whole reservation.
func (rv *Reservation) Cancel(ctx context.Context) error { return rv.Settle(ctx, 0) }

// settle applies final where the reservation was decided (the store, or
// the local fallback) and reports whether it was applied (false: the
// store had settled it already); marker is how long Redis keeps the
// reservation's marker.
func (rv *Reservation) settle(ctx context.Context, final int64, marker time.Duration) (bool, error) {
	l := rv.lim
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if rv.via == settleLocal {
		rv.settleIn(l.local, l.now(), final)
	} else {
		// The store charged the whole cost it reserved (held is n).
		a := settleAsk{Plans: []*model.Plan{&rv.p.Plan}, Keys: []string{rv.key}, ID: rv.id, Delta: final - rv.n, Marker: marker, Now: l.now(), At: rv.at}
		if ps := rv.path; ps != nil {
			a.Plans, a.Keys, a.Path = ps.views, ps.keys, true
		}
		applied, err := l.store.Settle(ctx, a)
		if err != nil {
			return false, unanswered(err, "settle", rv.key)
		}
		if !applied {
			return false, nil
		}
	}
	if final < rv.held && l.denies != nil && rv.path == nil {
		l.denies.delete(rv.p.ID, rv.key)
	}
	return true, nil
}

// settleIn applies final to rv's buckets in local, which decided it
// under rv.ticks (a path's: ps.ticks) with rv.held charged.
func (rv *Reservation) settleIn(local *localStore, now, final int64) {
	delta := final - rv.held
	if ps := rv.path; ps != nil {
		for i, p := range ps.plans {
			local.settle(p.ID, ps.keys[i], now, rv.at, ps.ticks[i], delta)
		}
		return
	}
	local.settle(rv.p.ID, rv.key, now, rv.at, rv.ticks, delta)
}

// settle moves key's local bucket by delta events at now, for a
// reservation made at at (see settleBucketAt). A key not held is a full
// bucket: a refund leaves it so.
func (s *localStore) settle(id uint64, key string, now, at int64, ticks []tickLimit, delta int64) {
	k := makeLocalKey(id, key)
	sh := s.m.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.m.entry(sh, k, now, delta > 0)
	if e == nil {
		return
	}
	if !e.b.set && e.b.tats == nil {
		e.b.tats = e.buf[:0]
	}
	settleBucketAt(&e.b, now, at, ticks, delta)
}
