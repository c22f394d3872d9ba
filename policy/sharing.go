package policy

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// checkScope refuses the scope options that contradict each other or
// name nothing.
func checkScope[C, H any](cfg *Config[C, H]) error {
	switch {
	case cfg.scopeSet && cfg.scope == "":
		return errors.New("WithScope: empty scope; omit the option for one budget per key across the middleware's routes")
	case cfg.routeSet && cfg.route == "":
		return errors.New(`WithRoute: empty pattern; name the route the middleware guards, such as "GET /orders/{id}"`)
	case cfg.scopeSet && cfg.routeSet:
		return errors.New("WithScope and WithRoute both name the middleware's buckets; keep one")
	case cfg.perRoute && (cfg.scopeSet || cfg.routeSet):
		return errors.New("WithPerRoute(true) names the buckets by each request's route, and WithScope or WithRoute by a fixed name; keep one")
	}
	return nil
}

// A middleware without a scope is one budget per key across the routes
// it guards, named by its limits alone, as no framework says whether a
// middleware was mounted on a group or on one route. Two such middlewares
// with the same limits on one limiter share that budget: a helper that
// makes one per route, or two groups given twin middlewares. That is said
// once, in one log line naming the routes where each was first seen, when
// both have seen requests on different routes for keys of one kind.
//
// The middlewares of one limiter with the same limits form a mountGroup;
// each has a mount, which the group holds weakly, so that a middleware
// dropped is forgotten.

// mount is where a middleware without a scope first met a request.
type mount struct {
	group *mountGroup
	label string                   // the limits, for the log line
	first atomic.Pointer[sighting] // nil until the first request
}

// sighting is a middleware's first request: where it was and its key's
// kind.
type sighting struct {
	where string // "GET /orders", or the path when the router reports no route
	kind  string // the key up to its first ':' ("ip", "tenant"), or all of it
}

// mountGroup is the middlewares without a scope of one limiter and one set
// of limits.
type mountGroup struct {
	mu      sync.Mutex
	members []weak.Pointer[mount]
	said    bool
}

type groupKey struct {
	lim    weak.Pointer[core.Limiter]
	limits string
}

var mountGroups struct {
	sync.Mutex
	m map[groupKey]*mountGroup
}

// join returns the mount of a new middleware without a scope on lim under
// limits, in the group of the others with the same.
func join(lim *core.Limiter, limits []core.Limit) *mount {
	texts := make([]string, len(limits))
	for i, l := range limits {
		texts[i] = fmt.Sprintf("%s %q %s %s", l.String(), l.Name, l.Refill, l.Zone)
	}
	k := groupKey{lim: weak.Make(lim), limits: strings.Join(texts, "; ")}
	mountGroups.Lock()
	if mountGroups.m == nil {
		mountGroups.m = make(map[groupKey]*mountGroup)
	}
	for gk := range mountGroups.m {
		if gk.lim.Value() == nil {
			delete(mountGroups.m, gk)
		}
	}
	g := mountGroups.m[k]
	if g == nil {
		g = &mountGroup{}
		mountGroups.m[k] = g
	}
	mountGroups.Unlock()
	m := &mount{group: g, label: limitsLabel(limits)}
	g.mu.Lock()
	live := g.members[:0]
	for _, w := range g.members {
		if w.Value() != nil {
			live = append(live, w)
		}
	}
	g.members = append(live, weak.Make(m))
	g.mu.Unlock()
	return m
}

// limitsLabel writes limits for a log line.
func limitsLabel(limits []core.Limit) string {
	texts := make([]string, len(limits))
	for i, l := range limits {
		texts[i] = l.String()
	}
	return strings.Join(texts, ", ")
}

// pather is implemented by request views that know the request's path
// (httplimit's), to name a middleware whose router reports no route.
type pather interface{ Path() string }

// where names the place of r: its route, or its path when the router
// reports none.
func where(r keyfunc.Request) string {
	if rt, err := keyfunc.Route()(r); err == nil {
		return strings.TrimPrefix(rt, "route:")
	}
	if pr, ok := r.(pather); ok {
		return "path " + pr.Path() + " (the router reports no route pattern)"
	}
	return "a request whose route the middleware cannot see"
}

// note records m's first request, r with key, and logs, once per group,
// two middlewares of the group first seen on different routes with keys
// of one kind.
func (m *mount) note(lim *core.Limiter, r keyfunc.Request, key string) {
	kind, _, _ := strings.Cut(key, ":")
	s := &sighting{where: strings.Clone(where(r)), kind: strings.Clone(kind)}
	g := m.group
	g.mu.Lock()
	if !m.first.CompareAndSwap(nil, s) {
		g.mu.Unlock()
		return
	}
	var other *sighting
	if !g.said && kind != "route" { // keys by route are apart by themselves
		for _, w := range g.members {
			o := w.Value()
			if o == nil || o == m {
				continue
			}
			if f := o.first.Load(); f != nil && f.kind == kind && f.where != s.where {
				other, g.said = f, true
				break
			}
		}
	}
	g.mu.Unlock()
	if other == nil {
		return
	}
	lim.Logger().Warn("sluice: two middlewares share one budget per key: they have the same limits and no scope, "+
		"and each counts every route it guards in one budget; to count them apart give each its own WithScope "+
		"(or WithPerRoute(true) to count per route); to share on purpose give both the same WithScope (logged once)",
		"first", other.where, "second", s.where, "limits", m.label, "key", kind)
}

// noteUnmatched marks that a per-route policy saw a request with a route,
// or logs, once, that it saw one without before any with.
func (p *Policy) noteUnmatched(r keyfunc.Request) {
	if r.Route() != "" {
		p.matched.Store(true)
		return
	}
	if !p.blind.CompareAndSwap(false, true) {
		return
	}
	p.lim.Logger().Warn("sluice: a middleware counting per route (WithPerRoute(true)) sees a request without a route "+
		"pattern and has seen none with one, so it counts every request in one scope, route:unmatched; "+
		"on a router that reports no pattern (gorilla/mux, httprouter) mount it on the route with WithRoute(\"GET /orders\") "+
		"instead, or around the whole router drop WithPerRoute for one budget (logged once)",
		"at", where(r))
}
