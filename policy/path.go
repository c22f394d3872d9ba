package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// PathLevel is a level of a path of keys below its root (see [WithPath]):
// its name, which labels headers, problems and metrics and so must be one
// of a few ("team", "user", "key"), the function that finds its key in a
// request, and its limits.
type PathLevel struct {
	// Name names the level. It must be non-empty and differ from the
	// other levels' names.
	Name string
	// Key finds the level's key in a request, such as keyfunc.Header
	// ("X-Team") or a claim. A key function that fails with
	// [keyfunc.ErrNoKey] ends the request's path at the level above: a
	// request without an API key is decided on its organisation, team and
	// user. Any other error fails the request as a key error does.
	Key keyfunc.Func
	// Limits are the level's limits, unless Plan or an override chooses.
	Limits []core.Limit
	// Plan, if not nil, chooses the level's limits per request from the
	// request and the level's key (the team's plan, say), as
	// [WithLimitFunc] chooses the root's. An error fails the request as
	// WithLimitFunc's does.
	Plan func(r keyfunc.Request, key string) ([]core.Limit, error)
}

// WithPath decides each request on a path of keys, root first, all or
// nothing, in one script call (see [core.PathRule]): the middleware's key
// and limit (with [WithLimitFunc], [WithLimits] and [WithOverrides] as
// usual) are the root level's, named root, and below are the levels
// given, each with its key function and limits. A request is admitted
// only if every level admits it, and then every level is charged; a
// request any level denies charges no level. For example, an
// organisation's monthly quota, its team's rate, the user's burst and the
// API key's rate:
//
//	httplimit.New(lim, core.PerCalendarMonth(100_000, "Asia/Tokyo"), keyfunc.Header("X-Org"),
//		httplimit.WithScope("api"),
//		httplimit.WithPath("org",
//			policy.PathLevel{Name: "team", Key: keyfunc.Header("X-Team"), Limits: []core.Limit{core.PerSecond(50)}},
//			policy.PathLevel{Name: "user", Key: keyfunc.Header("X-User"), Limits: []core.Limit{core.PerMinute(600).WithBurst(60)}},
//			policy.PathLevel{Name: "key", Key: keyfunc.Header("X-API-Key"), Limits: []core.Limit{core.PerSecond(5)}}))
//
// With [WithOverrides], an override of a level's key (as its key function
// returns it) replaces that level's limits, so a plan changes at run
// time for a team or an API key as for the root. Allow and deny entries
// apply to the root's key only.
//
// The rate-limit fields, the problem body's violated-policies and the
// metrics name the deciding limit as "level.limit" ("user.60/m" for an
// unnamed limit, "org.monthly" for one named monthly), and
// [core.Result.Level] is the deciding level. Without [WithScope] the
// buckets are the route's, as every middleware's are: give the path a
// scope to share an organisation's quota across routes. A
// [WithConcurrency] cap counts the requests in flight of the whole path
// (the API key's, with one). WithPath cannot be used with [WithWait].
//
// Default: none; the middleware decides one key.
func WithPath[C, H any](root string, below ...PathLevel) Option[C, H] {
	return func(c *Config[C, H]) {
		c.pathRoot, c.path, c.pathSet = root, slices.Clone(below), true
	}
}

// pathSet is a policy's path: its root's name and the levels below.
type pathSet struct {
	root    string
	below   []PathLevel
	rules   pathRules
	share   *core.Share  // WithShare's; nil: none
	shareAt int          // the shared level's index, the root 0
	classOf keyfunc.Func // WithClass's; nil: none
}

// checkPath validates WithPath's levels against the rest of cfg.
func checkPath[C, H any](cfg *Config[C, H]) (*pathSet, error) {
	if !cfg.pathSet {
		return nil, nil
	}
	if cfg.wait > 0 {
		return nil, errors.New("WithPath cannot be used with WithWait")
	}
	if cfg.pathRoot == "" {
		return nil, errors.New("WithPath: the root level has no name")
	}
	if 1+len(cfg.path) > core.MaxLevels {
		return nil, fmt.Errorf("WithPath: %d levels, at most %d", 1+len(cfg.path), core.MaxLevels)
	}
	names := []string{cfg.pathRoot}
	for i, lv := range cfg.path {
		switch {
		case lv.Name == "":
			return nil, fmt.Errorf("WithPath: level %d has no name", i+1)
		case slices.Contains(names, lv.Name):
			return nil, fmt.Errorf("WithPath: two levels are named %q", lv.Name)
		case lv.Key == nil:
			return nil, fmt.Errorf("WithPath: level %q has no key function", lv.Name)
		case len(lv.Limits) == 0 && lv.Plan == nil:
			return nil, fmt.Errorf("WithPath: level %q has no limits", lv.Name)
		}
		for _, l := range lv.Limits {
			if err := l.Validate(); err != nil {
				return nil, fmt.Errorf("WithPath: level %q: %w", lv.Name, err)
			}
		}
		names = append(names, lv.Name)
	}
	return &pathSet{root: cfg.pathRoot, below: slices.Clone(cfg.path)}, nil
}

// pathRules remembers the policy rules of a path's limit sets (one per
// distinct combination of the levels' limits and route), up to maxRules.
type pathRules struct {
	mu    sync.RWMutex
	rules map[string]*rule
}

// pathOf finds the path of request r whose root key is key and whose root
// rule is root: the keys of its levels (the path stops above a level whose
// key function finds no key), and the rule deciding them all.
func (p *Policy) pathOf(r keyfunc.Request, key string, root *rule) (*rule, []string, stage, error) {
	ps := p.path
	keys := []string{key}
	levels := [][]core.Limit{root.rootLimits()}
	for _, lv := range ps.below {
		k, err := lv.Key(r)
		if errors.Is(err, keyfunc.ErrNoKey) || err == nil && k == "" {
			break
		}
		if err != nil {
			return nil, nil, atKey, err
		}
		limits := lv.Limits
		if lv.Plan != nil {
			if limits, err = lv.Plan(r, k); err != nil {
				return nil, nil, atLimit, err
			}
		}
		if p.ovr != nil {
			if o, ok := p.ovr.set.Lookup(k); ok && len(o.Limits) > 0 {
				limits = o.Limits
			}
		}
		keys = append(keys, k)
		levels = append(levels, limits)
	}
	scope := p.rules.set.scope
	if p.rules.set.perRoute {
		scope = routeScope(r)
	}
	var id strings.Builder
	id.WriteString(strconv.Quote(scope))
	for _, ls := range levels {
		id.WriteByte('|')
		for _, l := range ls {
			id.WriteString(l.String())
			id.WriteString(strconv.Quote(l.Name))
			id.WriteString(string(l.Refill) + l.Zone)
			id.WriteByte(';')
		}
	}
	rl, err := ps.rules.get(id.String(), func() (*rule, error) { return p.newPathRule(scope, levels) })
	if err == nil {
		rl, err = ps.classRule(r, rl)
	}
	if err != nil {
		return nil, nil, atLimit, err
	}
	return rl, keys, atDecide, nil
}

// get returns the rule named id, made by mk if it is not known.
func (c *pathRules) get(id string, mk func() (*rule, error)) (*rule, error) {
	c.mu.RLock()
	rl := c.rules[id]
	c.mu.RUnlock()
	if rl != nil {
		return rl, nil
	}
	rl, err := mk()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.rules == nil {
		c.rules = make(map[string]*rule)
	}
	if len(c.rules) < maxRules {
		c.rules[id] = rl
	}
	c.mu.Unlock()
	return rl, nil
}

// rootLimits returns the limits of a root rule.
func (rl *rule) rootLimits() []core.Limit { return rl.limits }

// newPathRule prepares the rule of a path whose levels have limits
// levels, in scope.
func (p *Policy) newPathRule(scope string, levels [][]core.Limit) (*rule, error) {
	ps, set := p.path, p.rules.set
	names := []string{ps.root}
	for _, lv := range ps.below[:len(levels)-1] {
		names = append(names, lv.Name)
	}
	cls := make([]core.Level, len(levels))
	for i, ls := range levels {
		cls[i] = core.Level{Name: names[i], Limits: ls}
		if ps.share != nil && i == ps.shareAt {
			cls[i].Share = ps.share
		}
	}
	pr, err := p.lim.PreparePath(scope, cls...)
	if err != nil {
		return nil, err
	}
	if set.penaltySet {
		if pr, err = pr.WithPenalty(set.penalty); err != nil {
			return nil, err
		}
	}
	if set.canary {
		if pr, err = pr.WithEnforce(set.enforce); err != nil {
			return nil, err
		}
	}
	if set.dryRun {
		pr = pr.DryRun()
	}
	rl := &rule{path: pr, cap: set.cap}
	if set.cap != nil {
		rl.slots = slotPrefix("path " + scope)
	}
	var items []string
	for i, ls := range levels {
		for _, l := range ls {
			item := sfString(names[i] + "." + limitName(l))
			rl.limits = append(rl.limits, l)
			rl.levels = append(rl.levels, names[i])
			rl.items = append(rl.items, item)
			rl.burstField = append(rl.burstField, strconv.Itoa(l.Burst))
			items = append(items, quotaItem(item, quota{q: int64(l.Burst), w: refillSeconds(l), unit: set.unit}))
		}
	}
	if set.cap != nil {
		items = append(items, set.cap.policyItem)
	}
	rl.policyField = strings.Join(items, ", ")
	return rl, ps.shareRules(rl)
}

// pathKey is the key of a whole path, for its concurrency slots: each key
// with its length, so no two paths share it.
func pathKey(keys []string) string {
	if len(keys) == 1 {
		return keys[0]
	}
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
	}
	return b.String()
}

// decidePath decides a request of cost n on the path keys under rl, by
// reservation when the response settles it.
func (p *Policy) decidePath(ctx context.Context, rl *rule, keys []string, n int) (core.Result, *settlement, error) {
	if p.settle == nil {
		res, err := rl.path.AllowN(ctx, keys, n)
		return res, nil, err
	}
	rsv, err := rl.path.Reserve(ctx, keys, n)
	if err != nil {
		return core.Result{}, nil, err
	}
	if !rsv.Result.Allowed {
		return rsv.Result, nil, nil
	}
	s := &settlement{rsv: rsv, n: n, set: p.settle, ctx: ctx}
	s.cost.Store(-1)
	return rsv.Result, s, nil
}
