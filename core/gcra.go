package core

// This file is the bucket's arithmetic in Go. It is the reference model the
// Lua script is tested against, step by step, and it is what the in-memory
// store and the local fallback run, so a key decided locally follows exactly
// the rules Redis applies. The script's arguments, reply and stored value:
// see the layout table at the top of core/internal/redisstore/bucket.lua.
//
// A bucket is a generic cell rate algorithm (GCRA) per limit: the state is the
// theoretical arrival time (TAT), the moment the bucket would be full again.
// Time is counted in ticks, r to the microsecond, and one event costs p ticks
// (see tickLimit), so a TAT is a whole number of microseconds plus a fraction
// frac/r with 0 <= frac < r. Every quantity is an integer, so nothing drifts.

// A stepped limit (see tickLimit) keeps its debt in events with the window
// it was counted in: its tat is {us: debt, frac: window index}, and its
// debt falls by k at the start of every window, to no less than zero. It
// waits for window starts rather than for ticks, so its durations come
// from until. A reservation on it waits at most until the next window's
// start: its debt never exceeds b + k.

// debtAt is limit t's debt at now from its stored state x, in ticks
// (events for a stepped limit); w is where a stepped limit stands.
func debtAt(x tat, now int64, t tickLimit, w stepWindow) int64 {
	if !t.Stepped() {
		return max(0, (x.us-now)*t.R+x.frac)
	}
	d := x.us
	if n := w.Idx - x.frac; n > 0 {
		if n >= ceilDiv(d, t.St.K) {
			return 0
		}
		d -= n * t.St.K
	}
	return max(0, d)
}

// until is how long, from now, until limit t's debt has fallen by x ticks
// (events for a stepped limit); 0 if x <= 0.
func until(x, now int64, t tickLimit, w stepWindow) int64 {
	if x <= 0 {
		return 0
	}
	if !t.Stepped() {
		return ceilDiv(x, t.R)
	}
	return t.StartOf(w, ceilDiv(x, t.St.K)) - now
}

// unitWait is how long, with debt d ticks, a unit request waits under t.
func unitWait(d, now int64, t tickLimit, w stepWindow) int64 {
	return until(d+t.P-t.Capacity(), now, t, w)
}

// tat is one limit's theoretical arrival time; for a stepped limit, its
// debt in events (us) and window index (frac).
type tat struct {
	us   int64 // whole microseconds
	frac int64 // ticks beyond us, 0 <= frac < r
}

// bucket is the stored state of one key under one plan. A missing bucket is a
// full one: the zero value with set == false.
type bucket struct {
	lock int64 // microsecond the penalty lock ends; 0 for none
	tats []tat
	set  bool
	full int64 // the microsecond its stepped limits are full again, for eviction (local memory only)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// windowsAt returns where each stepped limit of ticks stands at now.
func windowsAt(now int64, ticks []tickLimit) (ws [maxLimits]stepWindow) {
	for i, t := range ticks {
		if t.Stepped() {
			ws[i] = t.Window(now)
		}
	}
	return ws
}

// stepBucket applies one request of the given cost to b at time now (in
// microseconds) and reports whether b must be written back. maxWait is the
// longest reservation accepted (0 for a plain Allow), penalty the lock set on
// a denial (0 for none).
func stepBucket(b *bucket, now int64, ticks []tickLimit, cost, maxWait, penalty int64) (decision, bool) {
	for _, t := range ticks {
		if t.Stepped() {
			return stepMixed(b, now, ticks, cost, maxWait, penalty)
		}
	}
	return stepContinuous(b, now, ticks, cost, maxWait, penalty)
}

// stepContinuous is stepBucket for continuous limits only: the arithmetic
// of stepMixed without its windows, kept apart for speed (the usual case).
func stepContinuous(b *bucket, now int64, ticks []tickLimit, cost, maxWait, penalty int64) (decision, bool) {
	var d [maxLimits]int64 // current debt per limit in ticks
	for i, t := range ticks {
		if b.set && i < len(b.tats) {
			if x := (b.tats[i].us-now)*t.R + b.tats[i].frac; x > 0 {
				d[i] = x
			}
		}
	}
	var out decision
	out.Remaining = -1
	denied := false
	var retry, wait int64
	retryIdx := 0
	for i, t := range ticks {
		d2 := d[i] + cost*t.P
		c := t.Capacity()
		if over := d2 - c; over > 0 {
			w := ceilDiv(over, t.R)
			if over > maxWait*t.R {
				denied = true
			}
			if w > retry {
				retry, retryIdx = w, i
			}
			if w > wait {
				wait = w
			}
		}
	}
	if locked := b.set && now < b.lock; locked || denied {
		return refuseContinuous(b, &d, now, ticks, denied, locked, retry, retryIdx, penalty)
	}
	out.Allowed = true
	out.Wait = wait
	if cap(b.tats) < len(ticks) {
		b.tats = make([]tat, len(ticks))
	}
	b.tats = b.tats[:len(ticks)]
	for i, t := range ticks {
		d2 := d[i] + cost*t.P
		b.tats[i] = tat{us: now + d2/t.R, frac: d2 % t.R}
		rem := t.Left(d2)
		if out.Remaining < 0 || rem < out.Remaining {
			out.Remaining, out.Index, out.Reset = rem, i, ceilDiv(d2, t.R)
		}
		out.Next = max(out.Next, t.UnitWait(d2))
	}
	b.lock = 0
	b.set = true
	return out, true
}

// refuseContinuous is stepContinuous's refusal, with debts d: denied (a
// limit's retry at retryIdx, the longest, is retry) or under the key's
// lock (locked).
func refuseContinuous(b *bucket, d *[maxLimits]int64, now int64, ticks []tickLimit, denied, locked bool, retry int64, retryIdx int, penalty int64) (decision, bool) {
	var out decision
	out.Remaining = -1
	for i, t := range ticks {
		if !denied { // locked: the limit with the fewest tokens left decides
			if rem := t.Left(d[i]); out.Remaining < 0 || rem < out.Remaining {
				out.Remaining, out.Index = rem, i
			}
		}
		out.Next = max(out.Next, t.UnitWait(d[i]))
	}
	if denied { // the limit with the longest retry decides
		t := ticks[retryIdx]
		out.Index, out.Remaining = retryIdx, t.Left(d[retryIdx])
	}
	out.Reset = ceilDiv(d[out.Index], ticks[out.Index].R)
	return refuse(b, out, retry, now, penalty, locked, func() {
		for range ticks {
			b.tats = append(b.tats, tat{us: now})
		}
	})
}

// refuse finishes a refused decision out, whose longest retry is retry:
// under the key's lock (locked), or, with a penalty, locking the key now.
// The buckets are then written back unchanged, a missing one as full, which
// full appends to the emptied b.tats, so the lock is the only effect of
// the denial. It reports whether b changed.
func refuse(b *bucket, out decision, retry, now, penalty int64, locked bool, full func()) (decision, bool) {
	out.Retry = retry
	if locked {
		out.Locked = true
		out.Remaining = 0
		out.Retry = max(retry, b.lock-now)
		out.Next = max(out.Next, b.lock-now)
		return out, false
	}
	if penalty <= 0 {
		return out, false
	}
	out.Locked = true
	out.Remaining = 0
	out.Retry = max(retry, penalty)
	out.Next = max(out.Next, penalty)
	if !b.set {
		b.tats = b.tats[:0]
		full()
		b.set = true
	}
	b.lock = now + penalty
	return out, true
}

// lockBucket locks b, under ticks, until the microsecond until, unless a
// lock that ends later holds it (a lock is never shortened); a missing
// bucket is written as full. It returns when b's lock ends.
func lockBucket(b *bucket, now int64, ticks []tickLimit, until int64) int64 {
	if !b.set {
		ws := windowsAt(now, ticks)
		b.tats = b.tats[:0]
		for i, t := range ticks {
			if t.Stepped() {
				b.tats = append(b.tats, tat{us: 0, frac: ws[i].Idx})
			} else {
				b.tats = append(b.tats, tat{us: now})
			}
		}
		b.set = true
	}
	b.lock = max(b.lock, until)
	return b.lock
}

// stepMixed is stepBucket for limits of which some are stepped.
func stepMixed(b *bucket, now int64, ticks []tickLimit, cost, maxWait, penalty int64) (decision, bool) {
	ws := windowsAt(now, ticks)
	var d [maxLimits]int64 // current debt per limit in ticks
	for i, t := range ticks {
		if b.set && i < len(b.tats) {
			d[i] = debtAt(b.tats[i], now, t, ws[i])
		}
	}
	denied := false
	var retry, wait int64
	retryIdx := 0
	for i, t := range ticks {
		d2 := d[i] + cost*t.P
		c := t.Capacity()
		if over := d2 - c; over > 0 {
			w := until(over, now, t, ws[i])
			if t.Stepped() {
				if over > t.St.K || w > maxWait {
					denied = true
				}
			} else if over > maxWait*t.R {
				denied = true
			}
			if w > retry {
				retry, retryIdx = w, i
			}
			if w > wait {
				wait = w
			}
		}
	}
	if locked := b.set && now < b.lock; locked || denied {
		return refuseMixed(b, &d, &ws, now, ticks, denied, locked, retry, retryIdx, penalty)
	}
	return admitMixed(b, &d, &ws, now, ticks, cost, wait), true
}

// refuseMixed is stepMixed's refusal, with debts d in windows ws: denied
// (a limit's retry at retryIdx, the longest, is retry) or under the key's
// lock (locked).
func refuseMixed(b *bucket, d *[maxLimits]int64, ws *[maxLimits]stepWindow, now int64, ticks []tickLimit, denied, locked bool, retry int64, retryIdx int, penalty int64) (decision, bool) {
	var out decision
	out.Remaining = -1
	for i, t := range ticks {
		if !denied { // locked: the limit with the fewest tokens left decides
			if rem := t.Left(d[i]); out.Remaining < 0 || rem < out.Remaining {
				out.Remaining, out.Index = rem, i
			}
		}
		out.Next = max(out.Next, unitWait(d[i], now, t, ws[i]))
	}
	if denied { // the limit with the longest retry decides
		t := ticks[retryIdx]
		out.Index, out.Remaining = retryIdx, t.Left(d[retryIdx])
	}
	out.Reset = until(d[out.Index], now, ticks[out.Index], ws[out.Index])
	return refuse(b, out, retry, now, penalty, locked, func() {
		for i, t := range ticks {
			if t.Stepped() {
				b.tats = append(b.tats, tat{us: 0, frac: ws[i].Idx})
			} else {
				b.tats = append(b.tats, tat{us: now})
			}
		}
	})
}

// admitMixed is stepMixed's admission of cost, with debts d in windows
// ws, waiting wait (microseconds): every limit charged, the bucket
// written.
func admitMixed(b *bucket, d *[maxLimits]int64, ws *[maxLimits]stepWindow, now int64, ticks []tickLimit, cost, wait int64) decision {
	out := decision{Allowed: true, Wait: wait, Remaining: -1}
	if cap(b.tats) < len(ticks) {
		b.tats = make([]tat, len(ticks))
	}
	b.tats = b.tats[:len(ticks)]
	b.full = 0
	for i, t := range ticks {
		d2 := d[i] + cost*t.P
		var reset int64
		if t.Stepped() {
			b.tats[i] = tat{us: d2, frac: ws[i].Idx}
			reset = until(d2, now, t, ws[i])
			b.full = max(b.full, now+reset)
		} else {
			b.tats[i] = tat{us: now + d2/t.R, frac: d2 % t.R}
			reset = ceilDiv(d2, t.R)
		}
		rem := t.Left(d2)
		if out.Remaining < 0 || rem < out.Remaining {
			out.Remaining, out.Index, out.Reset = rem, i, reset
		}
		out.Next = max(out.Next, unitWait(d2, now, t, ws[i]))
	}
	b.lock = 0
	b.set = true
	return out
}

// ttl is how long a written bucket must be kept, in microseconds: until every
// limit is full again and any lock has ended. Never zero.
func (b *bucket) ttl(now int64, ticks []tickLimit) int64 {
	t := b.lock - now
	ws := windowsAt(now, ticks)
	for i, tl := range ticks {
		if i < len(b.tats) {
			if tl.Stepped() {
				t = max(t, until(debtAt(b.tats[i], now, tl, ws[i]), now, tl, ws[i]))
			} else {
				t = max(t, ceilDiv((b.tats[i].us-now)*tl.R+b.tats[i].frac, tl.R))
			}
		}
	}
	return max(t, 1)
}

// settleBucket is settleBucketAt for a reservation made at now.
func settleBucket(b *bucket, now int64, ticks []tickLimit, delta int64) bool {
	return settleBucketAt(b, now, now, ticks, delta)
}

// settleBucketAt moves every limit's debt in b by delta events at now
// (see Reservation.Settle), for a reservation made at at: negative
// refunds, positive charges. A refund never fills a bucket beyond full; a
// charge takes a debt at most one Burst beyond empty (2*capacity), or
// leaves one already beyond (a waiting reservation's) as it is. A stepped
// limit is settled in the window that held at (see settleStep). A missing
// bucket (or one of another shape) is full: a refund leaves it so. A lock
// is kept. It reports whether b must be written back. The script
// core/settle.lua does the same in Redis.
func settleBucketAt(b *bucket, now, at int64, ticks []tickLimit, delta int64) bool {
	if delta == 0 {
		return false
	}
	if !b.set || len(b.tats) != len(ticks) {
		if delta < 0 {
			return false
		}
		b.tats = b.tats[:0]
		for _, t := range ticks {
			if t.Stepped() {
				b.tats = append(b.tats, tat{frac: t.Window(at).Idx})
			} else {
				b.tats = append(b.tats, tat{us: now})
			}
		}
		b.lock = 0
		b.set = true
	}
	for i, t := range ticks {
		if t.Stepped() {
			b.tats[i] = settleStep(b.tats[i], t, t.Window(at), delta)
			continue
		}
		d := max(0, (b.tats[i].us-now)*t.R+b.tats[i].frac)
		after := max(0, d+delta*t.P)
		if delta > 0 && after > 2*t.Capacity() {
			after = max(d, 2*t.Capacity())
		}
		d = after
		b.tats[i] = tat{us: now + d/t.R, frac: d % t.R}
	}
	if b.full != 0 || hasStepped(ticks) {
		b.full = now + b.ttl(now, ticks)
	}
	return true
}
