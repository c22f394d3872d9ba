package core

import "strconv"

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
	if x.frac > w.idx {
		return x // counted in a later window since: the reservation's is closed
	}
	d := debtAt(x, 0, t, w) // the debt brought to the reservation's window
	after := max(0, d+delta)
	if delta > 0 && after > 2*t.capacity() {
		after = max(d, 2*t.capacity())
	}
	return tat{us: after, frac: w.idx}
}

// hasStepped reports whether some limit of ticks is stepped.
func hasStepped(ticks []tickLimit) bool {
	for _, t := range ticks {
		if t.stepped() {
			return true
		}
	}
	return false
}

// settleLimitArgs returns plan p's limits as the settle script's
// arguments (see the layout table at the top of core/settle.lua) for a
// settlement at now (the limiter's clock) of a reservation made elapsed
// microseconds before: for continuous limits the plan's own, shared and
// not to be modified; a stepped limit's are its decision's (bucket.lua's
// layout, a calendar's windows around now) and the elapsed time, from
// which the script finds the reservation's window on Redis's clock.
func settleLimitArgs(p *plan, now, elapsed int64) []any {
	if !p.stepped {
		return p.args
	}
	el := strconv.FormatInt(max(0, elapsed), 10)
	args := make([]any, 0, len(p.args)+10*len(p.ticks))
	args = append(args, p.args[0])
	at := 1
	for _, t := range p.ticks {
		switch {
		case t.calendar() != nil:
			args = append(args, t.st.cal.windows(now, t.st.k, t.b).args...)
			args = append(args, el)
		case t.stepped():
			args = append(args, p.args[at:at+4]...)
			args = append(args, el)
			at += 4
		default:
			args = append(args, p.args[at:at+3]...)
			at += 3
		}
	}
	return args
}

// limitArgs returns c's limits as the settle script's arguments: c.args,
// or for a settlement made without them, its plan's.
func (c *settleCall) limitArgs() []any {
	if c.args == nil {
		return c.plan.args
	}
	return c.args
}
