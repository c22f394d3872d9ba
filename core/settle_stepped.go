package core

// A reservation on a stepped limit (an interval or a calendar quota) is
// settled in the window it was made in: its final cost is that window's,
// even when it is settled after the window rolled. The window's debt then
// carries into the next ones as any stepped debt does (what is beyond the
// quota waits for later windows), so a refund never makes tokens the
// window never had, and a charge after the roll counts only where the
// window's debt spills over. A bucket that was charged in a later window
// since (its stored window is past the reservation's) has closed the
// reservation's window: the settlement changes nothing on that limit.

// settleStep is settleBucketAt for one stepped limit t whose stored
// state is x (its debt in events and the window it was counted in): delta
// applied in window w, the reservation's.
func settleStep(x tat, t tickLimit, w stepWindow, delta int64) tat {
	if x.frac > w.Idx {
		return x // counted in a later window since: the reservation's is closed
	}
	d := debtAt(x, 0, t, w) // the debt brought to the reservation's window
	after := max(0, d+delta)
	if delta > 0 && after > 2*t.Capacity() {
		after = max(d, 2*t.Capacity())
	}
	return tat{us: after, frac: w.Idx}
}

// hasStepped reports whether some limit of ticks is stepped.
func hasStepped(ticks []tickLimit) bool {
	for _, t := range ticks {
		if t.Stepped() {
			return true
		}
	}
	return false
}
