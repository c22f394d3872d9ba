package policy

import (
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/overrides"
)

// WithOverrides applies the run-time overrides of ov (see
// [overrides.New]) to the middleware's requests, by their key:
//   - limits replace the middleware's main limit for the key's requests,
//     as [WithLimitFunc] does (and before it: an override wins), beside
//     the limits of [WithLimits]; the rate-limit fields then describe
//     them. They draw on the key's buckets for those limits, so changing
//     a key's limits starts it from a full bucket.
//   - an allow entry lets the key's requests pass as [WithAllow] does,
//     and a deny entry refuses them as [WithDeny] does. An entry whose key
//     is an IP address or CIDR prefix ("203.0.113.0/24") matches the
//     client address (see [WithListClientIP]) instead.
//
// A change made on any replica applies within ov's refresh interval plus
// one round trip; looking an override up costs no I/O. An override whose
// limits cannot be used beside WithLimits (more than eight in all) is
// ignored, and that is logged once. A nil ov applies none.
//
// Default: none.
func WithOverrides[C, H any](ov *overrides.Set) Option[C, H] {
	return func(c *Config[C, H]) { c.ovr = ov }
}

// overrideRules are the rules of a policy's overridden limits, prepared once
// per distinct override (by its text) and route, and kept up to maxRules.
type overrideRules struct {
	set   *overrides.Set
	rules ruleCache
}

// initLists sets up the policy's lists and overrides from cfg.
func initLists[C, H any](p *Policy, cfg *Config[C, H]) error {
	l, err := newLists(p.lim, cfg.allow, cfg.deny, cfg.ovr, cfg.listIP)
	if err != nil {
		return err
	}
	p.lists = l
	if cfg.ovr != nil {
		p.ovr = &overrideRules{set: cfg.ovr, rules: ruleCache{lim: p.lim, set: p.rules.set, extra: p.rules.extra}}
	}
	return nil
}

// overridden returns the rule of key's overridden limits, for r's route
// when the policy counts per route; nil when it has none.
func (p *Policy) overridden(key string, r keyfunc.Request) *rule {
	if p.ovr == nil {
		return nil
	}
	o, ok := p.ovr.set.Lookup(key)
	if !ok || len(o.Limits) == 0 {
		return nil
	}
	// The text is kept by the set: no allocation.
	rl, err := p.ovr.rules.getOverride(o.String(), o.Limits, r)
	if err != nil {
		p.logOnce(err, 0, "an override of WithOverrides cannot be used beside the middleware's WithLimits; the key keeps its usual limit")
		return nil
	}
	return rl
}
