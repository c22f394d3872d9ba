package replay

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Sort puts events in the order a replay decides them: by time; of
// events at the same microsecond, admitted ones first, then the others by
// cost, the largest first; otherwise in their recorded order.
//
// Redis decides the keys of one batch in its queue's order under one
// reading of its clock, an order a recording does not see. This one
// gives every event of such a batch its recorded decision. A denial
// charges nothing, so the admissions of one instant fit together
// whatever their order, and the denials still do not fit after all of
// them. A denial that sets a penalty lock comes after every admission of
// its key at that instant, and locks out the requests after it, even
// those that would fit: the largest denied cost did not fit either, so
// it sets the lock first.
func Sort(events []Event) {
	slices.SortStableFunc(events, func(a, b Event) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		if c := cmp.Compare(rank(a.Outcome), rank(b.Outcome)); c != 0 {
			return c
		}
		if a.Outcome == Admitted {
			return 0
		}
		return cmp.Compare(b.Cost, a.Cost)
	})
}

// rank orders the outcomes of one instant: admitted first.
func rank(o Outcome) int {
	if o == Admitted {
		return 0
	}
	return 1
}

// decider decides events under one rule, on a memory limiter whose
// clock is the event's time.
type decider struct {
	now    time.Time
	key    *core.Rule
	path   *core.PathRule
	rule   *Rule
	minB   core.Limit // the limit with the smallest Burst, and its level
	minLvl string
}

// prepare compiles r on lim.
func (r *Rule) prepare(lim *core.Limiter) (*decider, error) {
	d := &decider{rule: r}
	if r.Levels != nil {
		p, err := lim.PreparePath("", r.Levels...)
		if err != nil {
			return nil, err
		}
		if r.Penalty > 0 {
			if p, err = p.WithPenalty(r.Penalty); err != nil {
				return nil, err
			}
		}
		d.path = p
		for _, lv := range r.Levels {
			for _, l := range lv.Limits {
				if d.minB.Burst == 0 || l.Burst < d.minB.Burst {
					d.minB, d.minLvl = l, lv.Name
				}
			}
		}
		return d, nil
	}
	k, err := lim.Prepare(r.Limits...)
	if err != nil {
		return nil, err
	}
	if r.Penalty > 0 {
		if k, err = k.WithPenalty(r.Penalty); err != nil {
			return nil, err
		}
	}
	d.key = k
	for _, l := range r.Limits {
		if d.minB.Burst == 0 || l.Burst < d.minB.Burst {
			d.minB = l
		}
	}
	return d, nil
}

// decide decides ev at its time: admitted or denied as the middleware
// would, reserved and refunded at once when the rule does not charge
// its status. A cost above the smallest Burst, which the engine refuses
// as an error, is a denial by that limit.
func (d *decider) decide(ctx context.Context, ev *Event) (core.Result, error) {
	d.now = ev.Time
	if ev.Cost > d.minB.Burst {
		return core.Result{Limit: d.minB, Level: d.minLvl, Time: ev.Time}, nil
	}
	refund := d.rule.Charged != nil && ev.Status != 0 && !d.rule.Charged(ev.Status)
	if !refund {
		if d.path != nil {
			return d.path.AllowN(ctx, ev.Path, ev.Cost)
		}
		return d.key.AllowN(ctx, ev.Key, ev.Cost)
	}
	var rv *core.Reservation
	var err error
	if d.path != nil {
		rv, err = d.path.Reserve(ctx, ev.Path, ev.Cost)
	} else {
		rv, err = d.key.Reserve(ctx, ev.Key, ev.Cost)
	}
	if err != nil {
		return core.Result{}, err
	}
	if rv.Result.Allowed {
		if err := rv.Settle(ctx, 0); err != nil {
			return core.Result{}, err
		}
	}
	return rv.Result, nil
}

// Replay decides events, in the order [Sort] puts them in, under rule,
// through the engine's own arithmetic (a [core.NewMemory] limiter, which
// the differential tests hold equal to the Redis scripts, on a clock
// that reads each event's time), and calls f with each decided event's
// index and result. Events rule does not apply to (a path for a rule of
// one key, a key it does not match) are passed by. Replay returns an
// error for a rule the engine refuses, events out of order, and an event
// the engine refuses (a path with more keys than the rule's levels).
func Replay(events []Event, rule Rule, f func(i int, res core.Result)) error {
	var d *decider
	clock := func() time.Time { return d.now }
	lim, err := core.NewMemory(core.WithClock(clock), core.WithLocalCapacity(capacityFor(events)))
	if err != nil {
		return err
	}
	if d, err = rule.prepare(lim); err != nil {
		return err
	}
	ctx := context.Background()
	for i := range events {
		ev := &events[i]
		if i > 0 && ev.Time.Before(events[i-1].Time) {
			return errors.New("replay: events out of order; Sort them first")
		}
		if !rule.applies(ev) {
			continue
		}
		res, err := d.decide(ctx, ev)
		if err != nil {
			return err
		}
		f(i, res)
	}
	return nil
}

// capacityFor is the local capacity of a replay of events: room for
// every key (of every level) they name, four times over, so that the
// memory limiter never drops a bucket that still holds a debt.
func capacityFor(events []Event) int {
	n := 0
	for i := range events {
		n += max(1, len(events[i].Path))
	}
	return max(1<<16, 4*n)
}
