package policy

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/core"
)

// rule is one set of limits a policy decides under, prepared on the
// engine, with the header values that never change computed once.
type rule struct {
	engine      *core.Rule
	limits      []core.Limit
	policyField string   // the RateLimit-Policy value
	burstField  []string // X-RateLimit-Limit per limit
	items       []string // each limit's RateLimit item name
	cap         *capRule // the policy's concurrency cap; nil: none
}

// ruleSettings are a policy's settings that every rule it prepares shares.
type ruleSettings struct {
	scope  string   // the middleware's scope (see WithScope)
	dryRun bool     // prepare dry-run engine rules (see WithDryRun)
	unit   string   // the RateLimit-Policy quota unit; "" leaves it out (see WithQuotaUnit)
	cap    *capRule // the concurrency cap (see WithConcurrency); nil: none
}

func newRule(lim *core.Limiter, set ruleSettings, limits []core.Limit) (*rule, error) {
	r, err := lim.PrepareScoped(set.scope, limits...)
	if err == nil && set.dryRun {
		r, err = r.DryRun()
	}
	if err != nil {
		return nil, err
	}
	rl := &rule{engine: r, limits: r.Limits(), cap: set.cap}
	items := make([]string, len(rl.limits), len(rl.limits)+1)
	for i, l := range rl.limits {
		rl.items = append(rl.items, limitItem(l))
		rl.burstField = append(rl.burstField, strconv.Itoa(l.Burst))
		items[i] = policyItem(l, set.unit)
	}
	if set.cap != nil {
		items = append(items, set.cap.policyItem)
	}
	rl.policyField = strings.Join(items, ", ")
	return rl, nil
}

// ruleCache remembers the rule of each main limit a policy has met (with
// the policy's extra limits beside it), so that a limit chosen per request
// is prepared once. It is bounded: past maxRules distinct limits, rules are
// prepared per request and not kept.
type ruleCache struct {
	lim   *core.Limiter
	set   ruleSettings
	extra []core.Limit
	last  atomic.Pointer[rule] // the rule used last: a lock-free hit
	mu    sync.RWMutex
	rules map[core.Limit]*rule
}

const maxRules = 4096

func (c *ruleCache) get(l core.Limit) (*rule, error) {
	if r := c.last.Load(); r != nil && r.limits[0] == l {
		return r, nil
	}
	c.mu.RLock()
	r := c.rules[l]
	c.mu.RUnlock()
	if r == nil {
		// The limit may come from request memory (a fiber header): keep
		// a copy.
		l.Name = strings.Clone(l.Name)
		var err error
		if r, err = newRule(c.lim, c.set, append([]core.Limit{l}, c.extra...)); err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.rules == nil {
			c.rules = make(map[core.Limit]*rule)
		}
		if len(c.rules) < maxRules {
			c.rules[l] = r
		}
		c.mu.Unlock()
	}
	c.last.Store(r)
	return r, nil
}
