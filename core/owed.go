package core

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/internal/model"
)

// This file is what the local fallback owes Redis. While a key is decided
// without Redis, Redis's bucket refills as if nobody were admitted; when the
// key's decisions go back to Redis, that bucket would be full, and a fleet
// whose fallbacks have just spent their shares would be admitted a whole
// burst more. So the fallback keeps, beside its buckets, a bucket per key of
// its own admissions alone (never Redis's, which keep its buckets warm and
// which Redis has counted already), under the same share, so that what it
// holds decays as the share refills. When the store next answers a
// decision on the key, what that bucket still holds is charged to Redis's
// bucket, in the background, as a settlement of a positive amount (the
// road's settle operation, with a marker of its own, so that a call sent
// again is applied once).
//
// What is charged is each key's smallest debt across its limits, in events,
// rounded up: never more than any one limit's, and never more than the
// share's burst. Summed over the fleet that is at most the limit's burst and
// one event per replica, a bound above what an exact bucket fed every
// admission would hold (the fleet's shares together refill at the limit's
// rate); a charge cannot take Redis's bucket beyond one burst past empty
// (settle.lua's cap).
//
// Bounds and answers: owedCapacity keys at most (the least owed goes
// first, a bucket full again at once), keys of at most maxOwedKey bytes
// (a longer key is not charged: its bucket comes back full, as before),
// maxCharging charges in flight per limiter (a key that finds them all
// busy stays owed until its next answer). A charge the breaker kept from
// Redis (the node is not back yet, or only probing) is owed again; a charge
// whose call timed out while this process was paused (the pause's, not
// Redis's) is sent again, as it was, up to chargeResends times: its marker
// has Redis apply it once, whether or not the lost send had reached it. A
// charge Redis did not answer otherwise is dropped: the key then returns as
// it would without this (full, at most one burst more), rather than risk
// charging twice. Paths, token leases and caps are not charged.

// owedCapacity bounds the keys the fallback remembers owing.
const owedCapacity = 16_384

// maxOwedKey is the longest key whose debt is remembered, verbatim.
const maxOwedKey = 256

// maxCharging bounds a limiter's charges in flight (give or take the
// callers starting one at the same moment).
const maxCharging = 64

// owedEntry is one key's debt: the fallback's own admissions on it, under
// the share it decided by.
type owedEntry struct {
	localEntry
	ticks []tickLimit // the share's limits when it last admitted
	p     *plan
	key   string // verbatim
}

// owedStore holds what the local fallback admitted that Redis has not
// seen, per key; see the top of this file.
type owedStore struct {
	m       *shardedMap[owedEntry]
	sending atomic.Int32 // charges in flight
}

func newOwedStore(capacity int) *owedStore {
	weight := func(e *owedEntry, now int64) int64 { return e.weight(now) }
	return &owedStore{m: newShardedMap(min(capacity, owedCapacity), weight)}
}

// holdsAny reports whether o, which may be nil, owes anything.
func (o *owedStore) holdsAny() bool { return o != nil && o.m.live.Load() != 0 }

// admitted records that the fallback admitted cost on key under p at now,
// deciding under the share's ticks.
func (o *owedStore) admitted(p *plan, key string, now int64, ticks []tickLimit, cost int64) {
	if len(key) > maxOwedKey {
		return
	}
	k := makeLocalKey(p.ID, key)
	sh := o.m.shard(k)
	sh.mu.Lock()
	e := o.m.entry(sh, k, now, true)
	if e.p == nil {
		e.p, e.key = p, strings.Clone(key)
	}
	e.ticks = ticks
	e.charge(now, ticks, cost)
	sh.mu.Unlock()
}

// take removes key's debt under p and returns it at now, in events (see
// owes), with the ticks it was counted under; 0 if it owes nothing.
func (o *owedStore) take(p *plan, key string, now int64) (int64, []tickLimit) {
	if len(key) > maxOwedKey {
		return 0, nil
	}
	k := makeLocalKey(p.ID, key)
	sh := o.m.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	if e == nil {
		o.sweep(sh, now)
		return 0, nil
	}
	n, ticks := e.owes(now), e.ticks
	delete(sh.m, k)
	o.m.removedOne(sh)
	return n, ticks
}

// sweep drops from sh up to evictSample entries that owe nothing any
// more, so that the debts of keys never asked again do not keep every
// answer looking keys up (see holdsAny). The caller holds sh.mu.
func (o *owedStore) sweep(sh *shard[owedEntry], now int64) {
	n := 0
	for k, e := range sh.m {
		if e.weight(now) <= 0 {
			delete(sh.m, k)
			o.m.removedOne(sh)
		}
		if n++; n == evictSample {
			return
		}
	}
}

// owes is e's debt at now in events: the smallest across its limits,
// rounded up.
func (e *owedEntry) owes(now int64) int64 {
	if !e.b.set || len(e.b.tats) != len(e.ticks) {
		return 0
	}
	ws := windowsAt(now, e.ticks)
	n := int64(-1)
	for i, t := range e.ticks {
		ev := ceilDiv(debtAt(e.b.tats[i], now, t, ws[i]), t.P)
		if n < 0 || ev < n {
			n = ev
		}
	}
	return max(n, 0)
}

// chargeOwed is told that the store answered a decision on key under p at
// now: what the fallback admitted on key that Redis has not seen is
// charged to Redis in the background (see the top of this file).
func (l *Limiter) chargeOwed(key string, p *plan, now int64) {
	o := l.local.owed
	if o.sending.Load() >= maxCharging {
		return // stays owed, for the key's next answer
	}
	n, ticks := o.take(p, key, now)
	if n <= 0 {
		return
	}
	o.sending.Add(1) // may pass maxCharging by the callers racing here
	if !l.bg.Run(func(ctx context.Context) {
		defer o.sending.Add(-1)
		l.sendCharge(ctx, p, key, n, ticks)
	}) {
		o.sending.Add(-1)
	}
}

// chargeMarker is how long Redis keeps a charge's marker: long enough for
// the call to be sent again (see chargeResends).
const chargeMarker = 10 * time.Second

// chargeResends bounds how many times one charge is sent again after a
// send that timed out in a pause of this process. A pause overlaps a send
// of a millisecond or so only now and then; a process paused at every send
// gives up on the charge, as it does on one Redis did not answer.
const chargeResends = 3

// sendCharge charges n events on key under p to the store, as a positive
// settlement: a charge the breaker kept away is owed again (counted under
// ticks, from now); one whose send timed out in a pause of this process is
// sent again under the same marker, which Redis applies once; one Redis
// did not answer otherwise is dropped.
func (l *Limiter) sendCharge(ctx context.Context, p *plan, key string, n int64, ticks []tickLimit) {
	now := l.now()
	a := settleAsk{Plans: []*model.Plan{&p.Plan}, Keys: []string{key}, ID: newID(), Delta: n, Marker: chargeMarker, Now: now, At: now}
	for sent := 0; ; sent++ {
		_, err := l.store.Settle(ctx, a)
		na, ok := errors.AsType[*noAnswer](err)
		switch {
		case !ok || na.Gone != nil:
			return // applied (or applied before), or the limiter is closing
		case na.Cause == nil:
			if sent == 0 {
				l.local.owed.admitted(p, key, now, ticks, n)
			}
			// Kept away after a send whose fate is unknown: owing it
			// again would charge it under a new marker, perhaps twice.
			return
		case !errors.Is(na.Cause, errPaused) || sent == chargeResends:
			return
		}
		a.Now = l.now()
	}
}
