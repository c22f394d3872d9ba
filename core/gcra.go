package core

// This file is the bucket's arithmetic in Go. It is the reference model the
// Lua script is tested against, step by step, and it is what the in-memory
// store and the local fallback run, so a key decided locally follows exactly
// the rules Redis applies. The script's arguments, reply and stored value:
// see the layout table at the top of core/bucket.lua.
//
// A bucket is a generic cell rate algorithm (GCRA) per limit: the state is the
// theoretical arrival time (TAT), the moment the bucket would be full again.
// Time is counted in ticks, r to the microsecond, and one event costs p ticks
// (see tickLimit), so a TAT is a whole number of microseconds plus a fraction
// frac/r with 0 <= frac < r. Every quantity is an integer, so nothing drifts.

// decision is the outcome of one call, durations in microseconds.
type decision struct {
	allowed   bool
	locked    bool
	remaining int64 // unit requests the deciding limit could still take
	retry     int64 // until the same request could be admitted (denied only)
	reset     int64 // until the deciding limit's bucket is full again
	wait      int64 // how long an admitted reservation must wait
	next      int64 // until a unit request could be admitted, after this decision
	index     int   // the limit that decided: the one that denied, else the one with the fewest tokens left
}

// A stepped limit (see tickLimit) keeps its debt in events with the window
// it was counted in: its tat is {us: debt, frac: window index}, and its
// debt falls by k at the start of every window, to no less than zero. It
// waits for window starts rather than for ticks, so its durations come
// from until. A reservation on it waits at most until the next window's
// start: its debt never exceeds b + k.

// debtAt is limit t's debt at now from its stored state x, in ticks
// (events for a stepped limit); w is where a stepped limit stands.
func debtAt(x tat, now int64, t tickLimit, w stepWindow) int64 {
	if !t.stepped() {
		return max(0, (x.us-now)*t.r+x.frac)
	}
	d := x.us
	if n := w.idx - x.frac; n > 0 {
		if n >= ceilDiv(d, t.st.k) {
			return 0
		}
		d -= n * t.st.k
	}
	return max(0, d)
}

// until is how long, from now, until limit t's debt has fallen by x ticks
// (events for a stepped limit); 0 if x <= 0.
func until(x, now int64, t tickLimit, w stepWindow) int64 {
	if x <= 0 {
		return 0
	}
	if !t.stepped() {
		return ceilDiv(x, t.r)
	}
	return t.startOf(w, ceilDiv(x, t.st.k)) - now
}

// unitWait is how long, with debt d ticks, a unit request waits under t.
func unitWait(d, now int64, t tickLimit, w stepWindow) int64 {
	return until(d+t.p-t.capacity(), now, t, w)
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
		if t.stepped() {
			ws[i] = t.window(now)
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
		if t.stepped() {
			return stepMixed(b, now, ticks, cost, maxWait, penalty)
		}
	}
	return stepContinuous(b, now, ticks, cost, maxWait, penalty)
}

// unitWaitTicks is unitWait for a continuous limit.
func unitWaitTicks(d int64, t tickLimit) int64 {
	return max(0, ceilDiv(d+t.p-t.capacity(), t.r))
}

// stepContinuous is stepBucket for continuous limits only: the arithmetic
// of stepMixed without its windows, kept apart for speed (the usual case).
func stepContinuous(b *bucket, now int64, ticks []tickLimit, cost, maxWait, penalty int64) (decision, bool) {
	var d [maxLimits]int64 // current debt per limit in ticks
	for i, t := range ticks {
		if b.set && i < len(b.tats) {
			if x := (b.tats[i].us-now)*t.r + b.tats[i].frac; x > 0 {
				d[i] = x
			}
		}
	}
	var out decision
	out.remaining = -1
	denied := false
	var retry, wait int64
	retryIdx := 0
	for i, t := range ticks {
		d2 := d[i] + cost*t.p
		c := t.capacity()
		if over := d2 - c; over > 0 {
			w := ceilDiv(over, t.r)
			if over > maxWait*t.r {
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
	out.allowed = true
	out.wait = wait
	if cap(b.tats) < len(ticks) {
		b.tats = make([]tat, len(ticks))
	}
	b.tats = b.tats[:len(ticks)]
	for i, t := range ticks {
		d2 := d[i] + cost*t.p
		b.tats[i] = tat{us: now + d2/t.r, frac: d2 % t.r}
		rem := max(0, (t.capacity()-d2)/t.p)
		if out.remaining < 0 || rem < out.remaining {
			out.remaining, out.index, out.reset = rem, i, ceilDiv(d2, t.r)
		}
		out.next = max(out.next, unitWaitTicks(d2, t))
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
	out.remaining = -1
	for i, t := range ticks {
		if !denied { // locked: the limit with the fewest tokens left decides
			if rem := max(0, (t.capacity()-d[i])/t.p); out.remaining < 0 || rem < out.remaining {
				out.remaining, out.index = rem, i
			}
		}
		out.next = max(out.next, unitWaitTicks(d[i], t))
	}
	if denied { // the limit with the longest retry decides
		t := ticks[retryIdx]
		out.index, out.remaining = retryIdx, max(0, (t.capacity()-d[retryIdx])/t.p)
	}
	out.reset = ceilDiv(d[out.index], ticks[out.index].r)
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
	out.retry = retry
	if locked {
		out.locked = true
		out.remaining = 0
		out.retry = max(retry, b.lock-now)
		out.next = max(out.next, b.lock-now)
		return out, false
	}
	if penalty <= 0 {
		return out, false
	}
	out.locked = true
	out.remaining = 0
	out.retry = max(retry, penalty)
	out.next = max(out.next, penalty)
	if !b.set {
		b.tats = b.tats[:0]
		full()
		b.set = true
	}
	b.lock = now + penalty
	return out, true
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
		d2 := d[i] + cost*t.p
		c := t.capacity()
		if over := d2 - c; over > 0 {
			w := until(over, now, t, ws[i])
			if t.stepped() {
				if over > t.st.k || w > maxWait {
					denied = true
				}
			} else if over > maxWait*t.r {
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
	out.remaining = -1
	for i, t := range ticks {
		if !denied { // locked: the limit with the fewest tokens left decides
			if rem := max(0, (t.capacity()-d[i])/t.p); out.remaining < 0 || rem < out.remaining {
				out.remaining, out.index = rem, i
			}
		}
		out.next = max(out.next, unitWait(d[i], now, t, ws[i]))
	}
	if denied { // the limit with the longest retry decides
		t := ticks[retryIdx]
		out.index, out.remaining = retryIdx, max(0, (t.capacity()-d[retryIdx])/t.p)
	}
	out.reset = until(d[out.index], now, ticks[out.index], ws[out.index])
	return refuse(b, out, retry, now, penalty, locked, func() {
		for i, t := range ticks {
			if t.stepped() {
				b.tats = append(b.tats, tat{us: 0, frac: ws[i].idx})
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
	out := decision{allowed: true, wait: wait, remaining: -1}
	if cap(b.tats) < len(ticks) {
		b.tats = make([]tat, len(ticks))
	}
	b.tats = b.tats[:len(ticks)]
	b.full = 0
	for i, t := range ticks {
		d2 := d[i] + cost*t.p
		var reset int64
		if t.stepped() {
			b.tats[i] = tat{us: d2, frac: ws[i].idx}
			reset = until(d2, now, t, ws[i])
			b.full = max(b.full, now+reset)
		} else {
			b.tats[i] = tat{us: now + d2/t.r, frac: d2 % t.r}
			reset = ceilDiv(d2, t.r)
		}
		rem := max(0, (t.capacity()-d2)/t.p)
		if out.remaining < 0 || rem < out.remaining {
			out.remaining, out.index, out.reset = rem, i, reset
		}
		out.next = max(out.next, unitWait(d2, now, t, ws[i]))
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
			if tl.stepped() {
				t = max(t, until(debtAt(b.tats[i], now, tl, ws[i]), now, tl, ws[i]))
			} else {
				t = max(t, ceilDiv((b.tats[i].us-now)*tl.r+b.tats[i].frac, tl.r))
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
			if t.stepped() {
				b.tats = append(b.tats, tat{frac: t.window(at).idx})
			} else {
				b.tats = append(b.tats, tat{us: now})
			}
		}
		b.lock = 0
		b.set = true
	}
	for i, t := range ticks {
		if t.stepped() {
			b.tats[i] = settleStep(b.tats[i], t, t.window(at), delta)
			continue
		}
		d := max(0, (b.tats[i].us-now)*t.r+b.tats[i].frac)
		after := max(0, d+delta*t.p)
		if delta > 0 && after > 2*t.capacity() {
			after = max(d, 2*t.capacity())
		}
		d = after
		b.tats[i] = tat{us: now + d/t.r, frac: d % t.r}
	}
	if b.full != 0 || hasStepped(ticks) {
		b.full = now + b.ttl(now, ticks)
	}
	return true
}
