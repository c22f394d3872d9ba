package core

import "strconv"

// This file is a shared level's fair share and class reserves in Go (see
// [Share] and docs/fairshare.md): the model the share section of
// core/internal/redisstore/path.lua is tested against, and what the
// in-memory store and the local fallback run.
//
// A shared level's key (the parent) keeps, beside its bucket, a record of
// the recent consumption of its children (the keys of the level below)
// counted in windows of shareGate.Window microseconds, aligned to the
// epoch: the admitted cost of the current window and of the one before,
// and the weights of the children that asked in each (a child counts in
// the window it last asked in). Each child keeps the same of its own:
// the window it last asked in, its admitted cost then and in the window
// before, and its weight. A child's recent consumption is the sliding
// window estimate cur*window + prev*(window-elapsed), the parent's total
// the same sum over its children, the active weight the sum of the
// weights of the children that asked in either window. Every update is of
// the asking child and the parent's sums: O(1) per decision, whatever the
// number of children.

// Reasons a shared level denies beyond its bucket (decision.Reason), as
// path.lua's reply carries them (its level field's 256s).
const (
	reasonBucket = 0 // the bucket's own denial, or an admission
	reasonFair   = 1 // the parent is contended and the child is over its fair share
	reasonClass  = 2 // the request's class may not spend the reserves of the classes above it
)

// shareSlack is how far over its weighted share of the recent total a
// child may be and still take from a contended parent: 1/16th. It
// absorbs the noise of the window estimate, so that a child offering its
// fair share exactly (the tie of max-min) is not refused for counting a
// little ahead.
const shareSlackNum, shareSlackDen = 1, 2

// fairParent is a shared level's record of its children's consumption:
// the window it was last updated in, the admitted cost of that window
// (cCur) and the one before (cPrev), and the weight of the children that
// last asked in each (aCur, aPrev). The zero value is an empty record.
type fairParent struct {
	win, cCur, cPrev, aCur, aPrev int64
	set                           bool
}

// fairChild is one child's record: the window it last asked in, its
// admitted cost then (cur) and in the window before (prev), and its
// weight then.
type fairChild struct {
	win, cur, prev, weight int64
	set                    bool
}

// String is the record as path.lua stores it.
func (p *fairParent) String() string {
	return strconv.FormatInt(p.win, 10) + " " + strconv.FormatInt(p.cCur, 10) + " " + strconv.FormatInt(p.cPrev, 10) + " " + strconv.FormatInt(p.aCur, 10) + " " + strconv.FormatInt(p.aPrev, 10)
}

// String is the record as path.lua stores it.
func (c *fairChild) String() string {
	return strconv.FormatInt(c.win, 10) + " " + strconv.FormatInt(c.cur, 10) + " " + strconv.FormatInt(c.prev, 10) + " " + strconv.FormatInt(c.weight, 10)
}

// shareRoll brings the records to window w = now/window and counts the
// child as asking in it with weight g.Weight. A record of another window
// than w or the one before is read as empty (a lost or stale value); the
// parent's sums are then kept no smaller than the child's own part of
// them, so a record Redis lost and the other kept never makes the child
// weigh nothing or own more than the whole.
func shareRoll(p *fairParent, c *fairChild, now int64, g *shareGate) {
	w := now / g.Window
	switch {
	case p.set && p.win == w:
	case p.set && p.win == w-1:
		p.cPrev, p.aPrev, p.cCur, p.aCur = p.cCur, p.aCur, 0, 0
	default:
		*p = fairParent{}
	}
	p.win, p.set = w, true
	switch {
	case c.set && c.win == w:
		p.aCur += g.Weight - c.weight
	case c.set && c.win == w-1:
		p.aPrev -= c.weight
		p.aCur += g.Weight
		c.prev, c.cur = c.cur, 0
	default:
		p.aCur += g.Weight
		c.cur, c.prev = 0, 0
	}
	c.win, c.weight, c.set = w, g.Weight, true
	p.aCur = max(p.aCur, g.Weight)
	p.aPrev = max(p.aPrev, 0)
	p.cCur = max(p.cCur, c.cur)
	p.cPrev = max(p.cPrev, c.prev)
}

// overShare reports whether the child's recent consumption is above its
// weighted share of the parent's total, with shareSlack: u/weight >
// slack*C/W. The products are compared as doubles, in this order, as
// path.lua compares them (the same IEEE operations give the same result;
// below 2^53 they are exact).
func overShare(p *fairParent, c *fairChild, now int64, g *shareGate, left int64) bool {
	e := now - p.win*g.Window
	u := c.cur*g.Window + c.prev*(g.Window-e)
	total := p.cCur*g.Window + p.cPrev*(g.Window-e)
	w := p.aCur + p.aPrev
	lhs := float64(u) * float64(w)
	rhs := float64(total) * float64(g.Weight)
	rhs *= float64(g.Contend*shareSlackDen + shareSlackNum*left)
	lhs *= float64(g.Contend * shareSlackDen)
	return lhs > rhs
}

// shareDenial is the decision of a shared level whose bucket (one
// continuous limit t, debt before the take d) would admit cost but whose
// gate refuses it: the take must leave thr tokens. Its retry is when the
// take would leave them (a fair share's may come sooner, as the child's
// consumption decays); it locks nothing.
func shareDenial(d int64, t tickLimit, cost, thr int64) decision {
	limit := t.Capacity() - thr*t.P // the debt the take may reach
	return decision{
		Remaining: max(0, limit-d) / t.P,
		Retry:     ceilDiv(d+cost*t.P-limit, t.R),
		Reset:     ceilDiv(d, t.R),
		Next:      max(0, ceilDiv(d+t.P-limit, t.R)),
	}
}

// gateShare judges a shared level whose bucket b (one continuous limit
// t) decided d: when d admits cost, the class's floor first, then, when
// the take leaves fewer than contend tokens, the child's fair share. It
// returns d, or the gate's denial, its Reason set.
func gateShare(b *bucket, d decision, t tickLimit, now, cost int64, g *shareGate, p *fairParent, c *fairChild) decision {
	if !d.Allowed {
		return d
	}
	var debt int64
	if b.set && len(b.tats) > 0 {
		debt = max(0, (b.tats[0].us-now)*t.R+b.tats[0].frac)
	}
	left := t.Capacity() - debt - cost*t.P
	switch {
	case left < g.Floor*t.P:
		out := shareDenial(debt, t, cost, g.Floor)
		out.Reason = reasonClass
		return out
	case g.Fair && left < g.Contend*t.P && overShare(p, c, now, g, left/t.P):
		out := shareDenial(debt, t, cost, g.Contend)
		out.Reason = reasonFair
		return out
	}
	return d
}

// shareCharge counts an admitted cost against the child and the parent.
func shareCharge(p *fairParent, c *fairChild, cost int64) {
	c.cur += cost
	p.cCur += cost
}

// shareTTL is how long, in microseconds from now, the records must live:
// until the end of the window after the current one, the last in which
// they still count.
func shareTTL(now int64, g *shareGate) int64 {
	return (now/g.Window+2)*g.Window - now
}
