package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// rule is one set of limits a policy decides under, in one scope, prepared
// on the engine, with the header values that never change computed once.
type rule struct {
	engine      *core.Rule
	id          ruleID // what it was prepared for (see ruleCache)
	limits      []core.Limit
	policyField string           // the RateLimit-Policy value
	burstField  []string         // X-RateLimit-Limit per limit
	items       []string         // each limit's RateLimit item name
	cap         *capRule         // the policy's concurrency cap; nil: none
	slots       string           // put before a key to name its concurrency slots: the scope's
	warnField   string           // X-RateLimit-Warning's value (see WithWarning)
	path        *core.PathRule   // a path's rule (see WithPath); engine is then nil
	levels      []string         // a path's: the level of each of limits
	classes     map[string]*rule // a path's with classes (see WithClass): the rule of each
}

// enforced reports whether rl enforces its limits on key (a path's: its
// root key): false in a dry run, and for a key a canary leaves in dry run
// (see WithEnforce).
func (rl *rule) enforced(key string) bool {
	switch {
	case rl.engine != nil:
		return rl.engine.Enforced(key)
	case rl.path != nil:
		return rl.path.Enforced(key)
	}
	return true
}

// ruleSettings are a policy's settings that every rule it prepares shares.
type ruleSettings struct {
	scope      string // the middleware's scope (see WithScope, WithRoute); "": none (core.Limiter.Prepare's buckets)
	perRoute   bool   // the request's route is the scope (see WithPerRoute)
	dryRun     bool   // prepare dry-run engine rules (see WithDryRun)
	canary     bool   // prepare canaries enforced on enforce of keys (see WithEnforce)
	enforce    float64
	warn       float64       // prepare rules with this warning threshold (see WithWarning); 0: none
	unit       string        // the RateLimit-Policy quota unit; "" leaves it out (see WithQuotaUnit)
	cap        *capRule      // the concurrency cap (see WithConcurrency); nil: none
	penalty    time.Duration // the penalty lock (see WithPenalty), if penaltySet
	penaltySet bool
	leases     *core.LeaseBound // token leases (see WithTokenLeases); nil: none
	shadow     []core.Limit     // shadow limits (see WithShadowLimits); nil: none
}

// unmatched is the route of every request that matched no route, or whose
// route the middleware cannot see: one scope for all of them, never one
// per path.
const unmatched = "route:unmatched"

// routeScope returns the scope of r's buckets per route: its route as
// [keyfunc.Route] names it ("route:GET /items/:id", HEAD counted as GET),
// or [unmatched].
func routeScope(r keyfunc.Request) string {
	s, err := keyfunc.Route()(r)
	if err != nil {
		return unmatched
	}
	return s
}

// routeID returns what decides r's route scope, without allocating: the
// method as keyfunc.Route folds it (a constant) and the pattern (which may
// be request memory, to be copied before it is kept).
func routeID(r keyfunc.Request) (method, pattern string) {
	pattern = r.Route()
	if pattern == "" {
		return "", ""
	}
	switch m := r.Method(); m {
	case "GET", "HEAD":
		return "GET", pattern
	case "POST":
		return "POST", pattern
	case "PUT":
		return "PUT", pattern
	case "PATCH":
		return "PATCH", pattern
	case "DELETE":
		return "DELETE", pattern
	case "CONNECT":
		return "CONNECT", pattern
	case "OPTIONS":
		return "OPTIONS", pattern
	case "TRACE":
		return "TRACE", pattern
	default:
		// An invented method: keyfunc.Route names it OTHER, unless the
		// pattern names it, so the pattern alone decides.
		return "OTHER", pattern
	}
}

func newRule(lim *core.Limiter, set ruleSettings, scope string, limits []core.Limit) (*rule, error) {
	r, err := lim.PrepareScoped(scope, limits...)
	if err == nil && set.shadow != nil {
		r, err = r.WithShadowLimits(set.shadow...) // kept by the modes below
	}
	if err == nil && set.penaltySet {
		r, err = r.WithPenalty(set.penalty)
	}
	if err == nil && set.canary {
		r, err = r.WithEnforce(set.enforce)
	}
	if err == nil && set.dryRun {
		r, err = r.DryRun()
	}
	if err == nil && set.warn > 0 {
		r, err = r.WithWarning(set.warn)
	}
	if err == nil && set.leases != nil {
		// Last: DryRun, WithPenalty, WithEnforce and WithWarning return rules without leases.
		r, err = r.WithTokenLeases(*set.leases)
		if err != nil {
			err = fmt.Errorf("WithTokenLeases: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	rl := &rule{engine: r, limits: r.Limits(), cap: set.cap}
	if set.warn > 0 {
		rl.warnField = strconv.FormatFloat(set.warn*100, 'g', 6, 64)
	}
	if set.cap != nil {
		rl.slots = slotPrefix(scope)
	}
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

// ruleID says what a rule of a policy is prepared for: a main limit (with
// the policy's extra limits beside it) or an override's limits (by the
// override's text), and, when the policy counts per route, a route (see
// routeID).
type ruleID struct {
	limit           core.Limit
	override        string
	method, pattern string
}

// ruleCache remembers the rules a policy has met, so that a limit or route
// met again is not prepared again. It is bounded: past maxRules distinct
// rules, rules are prepared per request and not kept. Routes do not
// overflow it: their patterns are the router's, not the client's.
type ruleCache struct {
	lim   *core.Limiter
	set   ruleSettings
	extra []core.Limit
	last  atomic.Pointer[rule] // the rule used last: a lock-free hit
	mu    sync.RWMutex
	rules map[ruleID]*rule
}

const maxRules = 4096

// errNoRequest is returned by get for a request-scoped rule asked for
// without a request; it cannot happen but for a bug.
var errNoRequest = errors.New("policy: a rule of the route asked for without a request")

// get returns the rule of main limit l, in the policy's scope or, per
// route, in r's route's. r may be nil unless per route.
func (c *ruleCache) get(l core.Limit, r keyfunc.Request) (*rule, error) {
	id := ruleID{limit: l}
	if c.set.perRoute {
		if r == nil {
			return nil, errNoRequest
		}
		id.method, id.pattern = routeID(r)
	}
	if rl := c.last.Load(); rl != nil && rl.id == id {
		return rl, nil
	}
	return c.lookup(id, r, func() []core.Limit { return append([]core.Limit{id.limit}, c.extra...) })
}

// getOverride returns the rule of an override's limits, named by its text.
func (c *ruleCache) getOverride(text string, limits []core.Limit, r keyfunc.Request) (*rule, error) {
	id := ruleID{override: text}
	if c.set.perRoute {
		id.method, id.pattern = routeID(r)
	}
	return c.lookup(id, r, func() []core.Limit { return append(append([]core.Limit(nil), limits...), c.extra...) })
}

// lookup finds id's rule, or prepares it with limits().
func (c *ruleCache) lookup(id ruleID, r keyfunc.Request, limits func() []core.Limit) (*rule, error) {
	c.mu.RLock()
	rl := c.rules[id]
	c.mu.RUnlock()
	if rl == nil {
		// The limit and the route may come from request memory (a fiber
		// header or route): keep copies.
		id.limit.Name = strings.Clone(id.limit.Name)
		id.override = strings.Clone(id.override)
		id.pattern = strings.Clone(id.pattern)
		scope := c.set.scope
		if c.set.perRoute {
			scope = routeScope(r)
		}
		var err error
		if rl, err = newRule(c.lim, c.set, scope, limits()); err != nil {
			return nil, err
		}
		rl.id = id
		c.mu.Lock()
		if c.rules == nil {
			c.rules = make(map[ruleID]*rule)
		}
		if len(c.rules) < maxRules {
			c.rules[id] = rl
		}
		c.mu.Unlock()
	}
	if id.override == "" {
		c.last.Store(rl)
	}
	return rl, nil
}
