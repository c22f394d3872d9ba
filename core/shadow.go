package core

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/sluicehq/sluice/core/internal/model"
)

// Shadow limits (Rule.WithShadowLimits) are limits decided beside a
// rule's own, enforced ones, on every decision, whose answers change
// nothing: to see what a new limit would deny before it is enforced.
// Each is a bucket of its own, apart from every enforced bucket (its
// fingerprint is marked, so even the same limit in the same scope is
// another bucket), decided alone: charged by every request it would
// admit on its own, whatever the enforced limits say, so that it counts
// what it would deny if it replaced them. On Redis the shadow buckets are
// keys of the same script call as the enforced ones (the batch form's
// keys after them), so a decision is still one EVALSHA.

// shadowSet is a rule's shadow limits as results report them.
type shadowSet struct {
	limits []Limit
	all    uint8 // a bit for each limit
}

// Shadows reports what a rule's shadow limits ([Rule.WithShadowLimits])
// would have decided of a request: for each, whether it would have
// denied it. Its zero value has no limits (a rule without shadow limits,
// or a decision that did not decide them). It is a value: copy it
// freely.
type Shadows struct {
	set    *shadowSet // nil: none
	denied uint8      // bit i: limit i would have denied
}

// Len returns the number of shadow limits decided: the rule's, or 0.
func (s Shadows) Len() int {
	if s.set == nil {
		return 0
	}
	return len(s.set.limits)
}

// Limit returns shadow limit i, in the order [Rule.WithShadowLimits] was
// given them. It panics if i is not below Len, as an index out of range
// does.
func (s Shadows) Limit(i int) Limit { return s.set.limits[i] }

// Denied reports whether shadow limit i would have denied the request.
func (s Shadows) Denied(i int) bool { return i >= 0 && i < s.Len() && s.denied&(1<<i) != 0 }

// AnyDenied reports whether some shadow limit would have denied the
// request.
func (s Shadows) AnyDenied() bool { return s.denied != 0 }

// shadowsOf returns the Shadows of d, a decision under p; all marks every
// shadow limit as denying (a deny cache's answer, see answered).
func shadowsOf(p *plan, d *decision, all bool) Shadows {
	if p.shadows == nil {
		return Shadows{}
	}
	if all {
		return Shadows{set: p.shadows, denied: p.shadows.all}
	}
	return Shadows{set: p.shadows, denied: d.Shadow}
}

// WithShadowLimits returns a rule with the same limits, scope, penalty,
// dry run, canary and buckets that also decides limits, its shadow
// limits, on every decision of [Rule.Allow], [Rule.AllowN] and
// [Rule.Wait], and reports in [Result.Shadow] which of them would have
// denied the request, never changing what the rule decides: a shadow
// limit never denies, delays or charges anything of the rule's own.
// Observers are told too (package sluiceprom counts them in
// sluice_shadow_decisions_total, with mode="shadow"). It is how a limit
// is tried on live traffic beside the one enforced: shadow the new limit,
// read its would-be denials, then enforce it (see [Rule.WithEnforce]).
//
// Each shadow limit is a bucket of its own per key, apart from every
// enforced bucket, decided alone (not together with the other shadow
// limits): it is charged by every request it would admit, with the
// request's cost and wait and without a penalty lock, whatever the
// enforced limits decide, so its would-be denials are those it would make
// if it were the limit enforced. On Redis the shadow buckets are keys in
// the same hash slot, decided in the same script call as the rule's
// own: a decision stays one EVALSHA. While the store is unavailable, the
// local fallback decides them as it decides the rule's limits (each
// replica's share, [Result.Degraded]); under [FailOpen] they are not
// decided. A denial answered from the deny cache (see [WithDenyCache])
// reports every shadow limit as denying, which is what Redis would have
// answered: the cache holds a key only until the first of the enforced
// and shadow limits could admit again.
//
// A rule with shadow limits has no token leases (apply
// [Rule.WithTokenLeases] to one and it returns an error). [Rule.Peek]
// and [Rule.Reset] are about the rule's own limits; a shadow bucket
// expires when it is full again, as every bucket does. No limits returns
// a rule without shadow limits; WithShadowLimits again replaces them. It
// returns an error wrapping [ErrInvalidLimit] for more than [MaxLimits]
// limits or an invalid one. The rule itself is unchanged.
func (r *Rule) WithShadowLimits(limits ...Limit) (*Rule, error) {
	if len(limits) > maxLimits {
		return nil, fmt.Errorf("%w: Rule.WithShadowLimits: %d shadow limits, at most %d", ErrInvalidLimit, len(limits), maxLimits)
	}
	p, err := r.lim.plans.compileScoped(r.p.scope, r.p.limits)
	if err != nil {
		return nil, err
	}
	p.modesOf(r.p)
	p.setShadow(nil, nil)
	if len(limits) == 0 {
		return &Rule{lim: r.lim, p: p}, nil
	}
	shadow := make([]*plan, len(limits))
	for i, l := range limits {
		sp, err := r.lim.plans.compileScoped(r.p.scope, []Limit{l})
		if err != nil {
			return nil, fmt.Errorf("core: Rule.WithShadowLimits: shadow limit %d: %w", i, err)
		}
		sp.markShadow()
		shadow[i] = sp
	}
	set := &shadowSet{limits: append([]Limit(nil), limits...), all: uint8(1<<len(limits) - 1)}
	p.setShadow(shadow, set)
	return &Rule{lim: r.lim, p: p}, nil
}

// ShadowLimits returns a copy of the rule's shadow limits (see
// [Rule.WithShadowLimits]), in the order they were given; nil for none.
func (r *Rule) ShadowLimits() []Limit {
	if r.p.shadows == nil {
		return nil
	}
	return append([]Limit(nil), r.p.shadows.limits...)
}

// setShadow gives p the shadow limits shadow (nil: none), reported as
// set.
func (p *plan) setShadow(shadow []*plan, set *shadowSet) {
	p.shadow, p.shadows, p.Shadow = shadow, set, nil
	for _, sp := range shadow {
		p.Shadow = append(p.Shadow, &sp.Plan)
	}
}

// markShadow makes p, a plan of one shadow limit, name buckets of its
// own: its fingerprint is a digest of the one it was compiled with, so it
// is apart from every enforced bucket's, in its scope or any other.
func (p *plan) markShadow() {
	sum := sha256.Sum256([]byte("shadow;" + p.FP))
	p.FP = hex.EncodeToString(sum[:6])
	p.ID = binary.LittleEndian.Uint64(sum[8:16])
}

// decideShadows decides p's shadow limits of a request of cost on key at
// now in local memory, each in its own bucket under ticksOf's limits
// (the limits in full, or a replica's share), and folds them into d:
// NewMemory's decisions, and the fallback's while the store is away.
func (ls *localStore) decideShadows(d *decision, shadow []*plan, ticksOf func(*plan) *share, key string, now, cost, maxWait int64) {
	for i, sp := range shadow {
		sh, c := ticksOf(sp), cost
		if c <= sp.minB {
			// As the rule's own limits: a request may cost more than a
			// replica's share, and then takes the whole share. One that
			// costs more than the limit's Burst is denied, as in Redis.
			c = min(c, sh.minB)
		}
		d.AddShadow(i, ls.take(sp.ID, key, now, sh.ticks, c, maxWait, 0))
	}
}

// memShadows is decideShadows for NewMemory's store, which sees model
// plans: each shadow plan's limits in full.
func (ls *localStore) memShadows(d *decision, shadow []*model.Plan, key string, now, cost, maxWait int64) {
	for i, sp := range shadow {
		d.AddShadow(i, ls.take(sp.ID, key, now, sp.Ticks, cost, maxWait, 0))
	}
}
