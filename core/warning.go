package core

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
)

// Warnings before the wall (Rule.WithWarning). A rule with a threshold
// marks each admission of a key that has used at least that fraction of
// the deciding limit (Result.Warning), and raises a threshold event when a
// key crosses it: once per key, per limit and per window across the fleet.
//
// Over the threshold: for the limit that decided (Result.Limit, the one
// with the fewest tokens left), Burst − Remaining ≥ ⌈at·Burst⌉ after the
// admission. A crossing: an admission of cost n that is over the
// threshold and was not before it, Burst − (Remaining + n) < ⌈at·Burst⌉.
// Every decision by Redis is one atomic script call on one clock, so a
// crossing is seen by exactly one decision in the fleet, which then asks
// the store to set the key's warning marker (warn.lua: PTTL, else SET PX;
// one extra call, made only on a crossing): only the call that sets it
// raises the event. The marker lives for the window:
//
//   - for a continuous bucket, from the crossing until the bucket would
//     be full again if the key sent nothing more: the time it takes to
//     refill what was used, about ⌈at·Burst⌉·Period/Rate;
//   - for an interval limit (PerInterval), until its next refill;
//   - for a calendar quota, until its calendar period ends.
//
// That is the deciding limit's ResetAfter at the crossing, on Redis's
// clock. A key that keeps crossing in the window (it hovers at the
// threshold) raises no more events until the marker expires. Each replica
// also remembers, in bounded memory, until when the marker it set or found
// holds, so that a hovering key costs no store call per crossing.

// warnConf is a plan's warning threshold (see Rule.WithWarning).
type warnConf struct {
	at float64 // the fraction of a limit used that warns, in (0, 1]
}

// usedAt is how many tokens of a limit of burst a key has used when it
// is at the threshold: ⌈at·burst⌉, at least 1.
func (w *warnConf) usedAt(burst int) int64 {
	return max(1, int64(math.Ceil(w.at*float64(burst)-1e-9)))
}

// over reports whether res, an admission, leaves its key over the
// threshold of res.Limit. (Not inlined, so that plan.marked is small
// where a plan without a threshold calls it.)
//
//go:noinline
func (w *warnConf) over(res *Result) bool {
	return res.Allowed && int64(res.Limit.Burst-res.Remaining) >= w.usedAt(res.Limit.Burst)
}

// crossed reports whether res, an admission of cost over the threshold,
// was the one that crossed it: its key was under it before.
func (w *warnConf) crossed(res *Result, cost int64) bool {
	return int64(res.Limit.Burst-res.Remaining)-cost < w.usedAt(res.Limit.Burst)
}

// marked sets res.Warning, for a plan with a threshold.
func (p *plan) marked(res *Result) {
	if p.warn != nil {
		res.Warning = p.warn.over(res)
	}
}

// WithWarning returns a rule with the same limits, scope, penalty, dry
// run, canary and buckets that warns when a key has used at least the
// fraction at of a limit: each admission over the threshold is marked
// [Result.Warning] (middleware then marks the response, see package
// policy's WithWarning), and the first admission that crosses it raises a
// [ThresholdEvent] for [WithThresholdHandler] and observers that
// implement [ThresholdObserver], once per key, limit and window across
// every replica on the same Redis (docs/middleware.md, "Warnings before
// the wall", defines the window). The threshold applies to the limit that
// decided each request, the one Result.Remaining describes.
//
// A key is over the threshold when Burst − Remaining ≥ ⌈at·Burst⌉ (at
// least one token used): at 0.8 a PerMinute(600) key is over once it has
// 120 tokens left or fewer. A denial is never marked, nor an admission
// without a count (fail-open). Decisions by the local fallback are marked
// against the replica's share, and raise no event; with token leases
// ([Rule.WithTokenLeases]) a crossing is judged on the replica's view of
// the bucket, so it may go unseen, but never raises more than one event
// per window. Decisions of a dry run ([Rule.DryRun], a canary's keys
// outside it) are marked and raise events as enforced ones do: the
// threshold is about use, which a dry run counts too.
//
// The mark costs one comparison per decision, the event one extra store
// call per crossing, and none without a handler or such an observer.
// Apply [Rule.WithTokenLeases] after WithWarning, which returns a rule
// without leases. It returns an error for at that is NaN, 0 or less, or
// above 1. The rule itself is unchanged.
func (r *Rule) WithWarning(at float64) (*Rule, error) {
	if !(at > 0 && at <= 1) {
		return nil, fmt.Errorf("core: Rule.WithWarning: threshold %v is not in (0, 1]", at)
	}
	p, err := r.lim.plans.compileScoped(r.p.scope, r.p.limits)
	if err != nil {
		return nil, err
	}
	p.modesOf(r.p)
	p.warn = &warnConf{at: at}
	return &Rule{lim: r.lim, p: p}, nil
}

// Warning returns the rule's warning threshold (see [Rule.WithWarning]),
// 0 for none.
func (r *Rule) Warning() float64 {
	if r.p.warn == nil {
		return 0
	}
	return r.p.warn.at
}

// ThresholdEvent is a key's crossing of a rule's warning threshold (see
// [Rule.WithWarning]), raised once per key, limit and window across the
// fleet.
type ThresholdEvent struct {
	// Key is the key that crossed: a copy, which the handler may keep.
	Key string
	// Limit is the limit whose threshold it crossed.
	Limit Limit
	// Threshold is the rule's: the fraction of Limit used.
	Threshold float64
	// Remaining is what Limit would still admit after the crossing
	// request.
	Remaining int
	// Window is how long the event stands for the key: no other event
	// is raised for it and Limit until it ends, on any replica.
	Window time.Duration
}

// ThresholdObserver is an [Observer] that is also told of threshold
// events (see [Rule.WithWarning]). The limiter finds it with a type
// assertion on the Observer given to [WithObserver]; the sluiceprom and
// sluiceotel packages implement it. Its method has an Observer's
// constraints.
type ThresholdObserver interface {
	Observer
	// ObserveThreshold is called once per threshold event, with the
	// limit whose threshold a key crossed (never the key).
	ObserveThreshold(limit Limit)
}

// WithThresholdHandler sets a function told of each threshold event (see
// [Rule.WithWarning]): once per key, limit and window across every
// replica that shares the limiter's Redis and prefix. It is called on the
// goroutine of the request that crossed, after its decision, so it must
// be fast and safe for concurrent use; send slow work elsewhere. A nil f
// tells nothing.
//
// Default: none.
func WithThresholdHandler(f func(ThresholdEvent)) Option {
	return func(o *options) { o.onThreshold = f }
}

// thresholds is a limiter's listeners to threshold events, and its memory
// of the markers it set or found; nil when nothing listens.
type thresholds struct {
	handler func(ThresholdEvent)
	obs     ThresholdObserver // nil: none
	seen    *shardedMap[warnSeen]
}

// warnSeen is until when (the limiter's clock) a key's marker holds.
type warnSeen struct{ until int64 }

// maxWarnSeen bounds the markers a limiter remembers.
const maxWarnSeen = 1 << 16

// newThresholds returns the listeners of o, nil for none.
func newThresholds(o options) *thresholds {
	t := &thresholds{handler: o.onThreshold}
	if to, ok := o.observer.(ThresholdObserver); ok && !isNil(o.observer) {
		t.obs = to
	}
	if t.handler == nil && t.obs == nil {
		return nil
	}
	t.seen = newShardedMap(maxWarnSeen, func(v *warnSeen, now int64) int64 { return v.until - now })
	return t
}

// warnKey names key's marker under limit index of plan id in memory.
func warnKey(id uint64, index int, key string) localKey {
	return makeLocalKey(id^uint64(index+1)*0x9e3779b97f4a7c15, key)
}

// holds reports whether the marker of k is known to hold at now.
func (t *thresholds) holds(k localKey, now int64) bool {
	if t.seen.live.Load() == 0 {
		return false
	}
	sh := t.seen.shard(k)
	sh.mu.Lock()
	v := sh.m[k]
	held := v != nil && now < v.until
	sh.mu.Unlock()
	return held
}

// remember notes that k's marker holds until until.
func (t *thresholds) remember(k localKey, now, until int64) {
	sh := t.seen.shard(k)
	sh.mu.Lock()
	t.seen.entry(sh, k, now, true).until = until
	sh.mu.Unlock()
}

// warned marks res, the store's admission of cost on key under p (a plan
// with a threshold), and raises the threshold event if res crossed it
// and the key's marker was not set in its window.
func (l *Limiter) warned(ctx context.Context, key string, p *plan, res *Result, d *decision, cost, now int64) {
	t := l.plans.thresholds
	if !res.Warning || t == nil || !p.warn.crossed(res, cost) {
		return
	}
	k := warnKey(p.ID, d.Index, key)
	if t.holds(k, now) {
		return
	}
	window := max(d.Reset, 1000) // at least the marker's millisecond
	first, left, err := l.store.Warn(ctx, key, &p.Plan, d.Index, window, now)
	if err != nil {
		return // no event: the store could not say whether it was the first
	}
	if !first {
		t.remember(k, now, now+left)
		return
	}
	t.remember(k, now, now+window)
	// A copy: the handler may keep it, and fiber's keys live in buffers
	// it reuses after the request.
	ev := ThresholdEvent{Key: strings.Clone(key), Limit: res.Limit, Threshold: p.warn.at, Remaining: res.Remaining, Window: time.Duration(window) * time.Microsecond}
	if t.obs != nil {
		t.obs.ObserveThreshold(ev.Limit)
	}
	if t.handler != nil {
		t.handler(ev)
	}
}
