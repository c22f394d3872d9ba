package policy

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/overrides"
)

// Option configures a middleware whose framework passes requests as C (the
// framework's context or request type). H holds the adapter's own settings,
// such as its deny and error handlers, which only the adapter defines.
// When an option is passed twice, the last one wins.
type Option[C, H any] func(*Config[C, H])

// Config is what the options of one middleware set. Only this package and
// the adapter that instantiates it touch it: the adapter's own options set
// Adapter, and [New] returns it.
type Config[C, H any] struct {
	// Adapter holds the adapter's own settings.
	Adapter H

	skip       func(C) bool
	cost       func(C) int
	limitFn    func(C) (core.Limit, error)
	extra      []core.Limit
	headers    HeaderStyle
	dryRun     bool
	enforce    float64 // WithEnforce's fraction, if enforceSet
	enforceOn  bool
	warnAt     float64 // WithWarning's threshold, if warnSet
	warnSet    bool
	report     func(C, DryRunReport)
	wait       time.Duration
	problem    bool
	scope      string
	scopeSet   bool
	perRoute   bool   // WithPerRoute
	route      string // WithRoute
	routeSet   bool
	penalty    time.Duration // WithPenalty
	penSet     bool
	jitter     time.Duration
	unit       string
	conc       core.ConcurrencyLimit
	concSet    bool
	chargeIf   func(int) bool
	finalCost  func(C, Response) int
	finalSet   bool
	allow      []string           // WithAllow
	deny       []string           // WithDeny
	listIP     []keyfunc.IPOption // WithListClientIP
	ovr        *overrides.Set     // WithOverrides
	pathRoot   string             // WithPath's root level
	path       []PathLevel        // WithPath's levels below the root
	pathSet    bool
	leases     core.LeaseBound // WithTokenLeases
	leaseSet   bool
	rec        Recorder    // WithRecord; nil: none
	share      *core.Share // WithShare's, on the level named shareLevel
	shareLevel string
	classOf    keyfunc.Func // WithClass
	shadow     []core.Limit // WithShadowLimits
}

// WithSkip exempts requests for which f reports true, such as health checks
// or an allowlist: they pass without a decision and without rate-limit
// fields. f must be safe for concurrent use. A nil f skips nothing.
//
// Default: none skipped.
func WithSkip[C, H any](f func(C) bool) Option[C, H] {
	return func(c *Config[C, H]) { c.skip = f }
}

// WithCost sets each request's cost in tokens. A cost below 1 or above the
// limit's Burst fails the request (500 by default); it never passes
// unlimited. f must be safe for concurrent use. A nil f costs 1.
//
// Default: 1 per request.
func WithCost[C, H any](f func(C) int) Option[C, H] {
	return func(c *Config[C, H]) { c.cost = f }
}

// WithLimitFunc chooses the limit per request, replacing the one given to
// the middleware, for example by the tenant's plan (free 60/min, pro
// 600/min). An error from f fails the request like a key error (400 when it
// wraps [keyfunc.ErrNoKey], else 500). Limits from [WithLimits] still
// apply. f must be safe for concurrent use. A nil f uses the middleware's
// limit.
//
// Default: the limit given to the middleware for every request.
func WithLimitFunc[C, H any](f func(C) (core.Limit, error)) Option[C, H] {
	return func(c *Config[C, H]) { c.limitFn = f }
}

// WithLimits adds limits checked and consumed together with the main one on
// the same key, such as an hourly cap beside a per-second rate. The
// middleware's constructor fails (an adapter panics) if one is invalid.
//
// Default: none.
func WithLimits[C, H any](more ...core.Limit) Option[C, H] {
	return func(c *Config[C, H]) { c.extra = append([]core.Limit(nil), more...) }
}

// WithHeaders selects the rate-limit fields written on responses (see
// [HeaderStyle]). Retry-After is sent on every 429 whatever the style. The
// constructor fails (an adapter panics) on an unknown style.
//
// Default: [HeadersLegacy].
func WithHeaders[C, H any](style HeaderStyle) Option[C, H] {
	return func(c *Config[C, H]) { c.headers = style }
}

// WithDryRun makes the middleware transparent, to try a limit on live
// traffic: it decides and charges buckets as usual (decisions are marked
// core.Result.DryRun, so metrics tell them apart), but it never denies,
// delays or fails a request, and writes no rate-limit fields. A request
// that could not be decided (no key, a bad cost, the store down under
// FailClosed) goes on too; the failure is logged once, as it would be
// outside a dry run. [WithWait] does not wait. [WithDryRunHandler] is told
// every would-be result.
//
// Default: false.
func WithDryRun[C, H any](on bool) Option[C, H] {
	return func(c *Config[C, H]) { c.dryRun = on }
}

// WithEnforce enforces the middleware's limits on a fraction of keys only,
// a canary for a new limit, and treats every other key as [WithDryRun]
// does: its requests are decided and charged as usual (marked
// core.Result.DryRun, so metrics count them as dry-run decisions), but
// never denied, delayed or failed, and get no rate-limit fields;
// [WithDryRunHandler] is told of each, would-be denials included. A keyed
// hash of the key picks the enforced keys (see core.Rule.WithEnforce): the
// same on every replica and after restarts, and growing with the
// fraction, so a key enforced at 5% stays enforced at 20%. Give the
// limiter core.WithSlotKey so that clients cannot tell or choose which
// keys are enforced.
//
// A request whose key is not known (the key function failed) is failed
// as usual, and lists ([WithAllow], [WithDeny]) apply to every key. 1
// enforces every key, as without the option; 0 none. With [WithPath]
// the root's key picks (see core.PathRule.WithEnforce): a path is
// enforced or left in dry run whole, with every level below its root.
// The constructor fails (an adapter panics) for a fraction that is NaN or
// outside [0, 1]. Under WithDryRun(true) every key is in dry run whatever
// the fraction.
//
// Default: 1, every key enforced.
func WithEnforce[C, H any](fraction float64) Option[C, H] {
	return func(c *Config[C, H]) { c.enforce, c.enforceOn = fraction, true }
}

// WithWarning marks the responses of requests admitted over a warning
// threshold, at, the fraction of the deciding limit a key has used (0.8:
// 80%), so that clients and dashboards see "close to the limit" before a
// 429. A marked response carries X-RateLimit-Warning, whose value is the
// threshold as a percentage ("80"), in every header style, HeadersNone
// included (gRPC: x-ratelimit-warning metadata); its core.Result.Warning
// is set. A key is over the threshold when Burst − Remaining ≥ ⌈at·Burst⌉
// (see core.Rule.WithWarning). The responses of denied requests are never
// marked, nor those of dry-run decisions, which carry no rate-limit field.
//
// The same threshold raises the engine's threshold events: once per key,
// limit and window across every replica, to the limiter's
// core.WithThresholdHandler and to observers that implement
// core.ThresholdObserver (the sluiceprom and sluiceotel packages do).
// docs/middleware.md ("Warnings before the wall") defines the window.
// The constructor fails (an adapter panics) for a threshold that is NaN,
// 0 or less, or above 1, and beside [WithPath].
//
// Default: none, no response is marked.
func WithWarning[C, H any](at float64) Option[C, H] {
	return func(c *Config[C, H]) { c.warnAt, c.warnSet = at, true }
}

// WithShadowLimits decides limits, the middleware's shadow limits, beside
// its own on every request, and enforces none of them: each is a bucket
// of its own per key, charged by every request it would admit, so that
// its would-be denials are those it would make if it were the limit
// enforced. It is how a new limit is tried on live traffic before a
// canary ([WithEnforce]) and enforcement: shadow the new limit, read its
// would-be denials, then enforce it. They are decided in the same Redis
// call as the middleware's own limits (one EVALSHA per request still),
// and never change a response: no denial, wait, header or failure comes
// of them. core.Result.Shadow says which would have denied (a deny
// handler or a WithDryRunHandler sees it in the Result), and a limiter's
// observer counts them (package sluiceprom: sluice_shadow_decisions_total,
// mode="shadow"). While Redis is unavailable the local fallback decides
// them as it decides the middleware's limits; core.Rule.WithShadowLimits
// has the details.
//
// Name the shadow limits (core.Limit.WithName) so that metrics tell
// them apart. The constructor fails (an adapter panics) for more than
// core.MaxLimits limits, an invalid one, or beside [WithTokenLeases] or
// [WithPath]. WithShadowLimits again replaces them.
//
// Default: none.
func WithShadowLimits[C, H any](limits ...core.Limit) Option[C, H] {
	return func(c *Config[C, H]) { c.shadow = append([]core.Limit(nil), limits...) }
}

// WithWait makes a request that would be denied wait up to max for its
// tokens instead (traffic smoothing): it reserves them and continues when
// they are due. One whose tokens cannot be due within max is denied at
// once, reserving nothing. The request's context ends the wait (answered
// 503 by default). Zero disables waiting; the constructor fails (an adapter
// panics) if max is negative.
//
// Default: 0.
func WithWait[C, H any](max time.Duration) Option[C, H] {
	return func(c *Config[C, H]) { c.wait = max }
}

// WithProblemJSON makes the default 429, 400, 500 and 503 bodies RFC 9457
// problem details (application/problem+json) instead of plain status text.
// Adapters whose framework has an error type of its own (echo, fiber)
// answer failures by returning that error unless this is on; with it on,
// they answer failures themselves with problem details, as the others do.
//
// Default: false.
func WithProblemJSON[C, H any](on bool) Option[C, H] {
	return func(c *Config[C, H]) { c.problem = on }
}

// WithScope names the middleware's budget: middlewares with the same scope
// and the same limits share buckets (on every replica, through Redis),
// across every route they guard. Without it a middleware is already one
// budget per key across its routes (see [WithPerRoute]); name a scope to
// keep two middlewares with the same limits apart (WithScope("search"),
// WithScope("export")), or to make several middlewares one budget on
// purpose. The buckets are those of the engine's
// [core.Limiter.PrepareScoped](name, limits...) (the main limit first, then
// those of [WithLimits]), so code outside the middleware, a login handler
// say, can draw on them or Reset them. Scopes are hashed into the Redis
// keys' fingerprint, so any text will do. The constructor fails (an
// adapter panics) on an empty one, or beside [WithRoute] or
// WithPerRoute(true).
//
// Default: no scope: the buckets of [core.Limiter.Prepare](limits...),
// one budget per key across every route the middleware guards.
func WithScope[C, H any](name string) Option[C, H] {
	return func(c *Config[C, H]) { c.scope, c.scopeSet = name, true }
}

// WithPenalty makes a denial by this middleware lock the request's key for
// d, on every replica: until the lock ends every request on the key's
// buckets is denied, with Retry-After set to the time left (see
// [core.WithPenalty]). It sets the lock per middleware, so that one engine
// can lock a login route's keys for a quarter of an hour and lock nothing
// elsewhere. Zero means no lock, even on an engine made with a penalty.
// The lock is in the key's buckets: middlewares sharing them (see
// [WithScope]) are locked together. The constructor fails (an adapter
// panics) for a negative d or one above [core.MaxPenalty].
//
// Default: the engine's penalty ([core.WithPenalty]), none unless set there.
func WithPenalty[C, H any](d time.Duration) Option[C, H] {
	return func(c *Config[C, H]) { c.penalty, c.penSet = d, true }
}

// WithTokenLeases decides the middleware's hot keys from token leases
// (see [core.Rule.WithTokenLeases]): each replica takes a lease of tokens
// from a key's buckets in one Redis call and admits from it at memory
// speed, so a key every replica hits costs one round trip per lease, not
// one per request. Admissions never exceed the limits; the only error is
// under-admission, at most bound tokens at any moment across all replicas.
// A cold key is decided by Redis exactly, as without leases. It applies to
// every limit the middleware decides (its limit, [WithLimits], the limits
// [WithLimitFunc] picks); requests that wait ([WithWait]) or are charged by
// the response ([WithChargeIf], [WithFinalCost]) are decided exactly. The
// constructor fails (an adapter panics) for an invalid bound, a stepped
// limit, or beside [WithPath]; a limit [WithLimitFunc] picks that leases
// cannot serve fails its requests, logged once. docs/hotkeys.md says when
// leases pay and when not.
//
// Default: off; every decision is one Redis call.
func WithTokenLeases[C, H any](bound core.LeaseBound) Option[C, H] {
	return func(c *Config[C, H]) { c.leases, c.leaseSet = bound, true }
}

// WithDryRunHandler sets a function told about every request a dry-run
// middleware decides or fails to decide (see [WithDryRun]), or a canary
// leaves in dry run (see [WithEnforce]), with the
// request, its key and the would-be result or the failure: to log
// would-be denials while a new limit is judged. It runs on the request
// path, so it must be fast and safe for concurrent use. The constructor
// fails (an adapter panics) when it is set without WithDryRun(true) or a
// WithEnforce below 1. A nil f tells nothing.
//
// Default: none.
func WithDryRunHandler[C, H any](f func(C, DryRunReport)) Option[C, H] {
	return func(c *Config[C, H]) { c.report = f }
}

// WithRetryJitter adds a random delay from 0 to max to each denial's
// Retry-After field (and to the retry time a problem-details body gives),
// so that clients denied together do not all come back at the same
// second. Retry-After is never earlier than the real wait, and never later
// than the real wait plus max, rounded up to whole seconds. The Result a
// deny handler gets, and the RateLimit field's window, are unchanged. Zero
// adds nothing; the constructor fails (an adapter panics) if max is
// negative.
//
// Default: 0.
func WithRetryJitter[C, H any](max time.Duration) Option[C, H] {
	return func(c *Config[C, H]) { c.jitter = max }
}

// WithQuotaUnit names what the limits count in RateLimit-Policy's qu
// parameter: "requests", "content-bytes" or "concurrent-requests", the
// units the draft registers. Name it when WithCost charges something other
// than one per request (bytes, say): q and r then count that unit. The
// constructor fails (an adapter panics) on another unit.
//
// Default: none, which the draft reads as requests.
func WithQuotaUnit[C, H any](unit string) Option[C, H] {
	return func(c *Config[C, H]) { c.unit = unit }
}

// WithConcurrency caps the requests in flight per key: at most c.Max
// requests of one key run at once, across every replica sharing the
// limiter's Redis (an upload endpoint capped at 4 per tenant, say). A
// request the rate limits admit then takes a slot of its key, and gives it
// back when the handlers after the middleware return, also when they
// panic or the client hangs up (see [Verdict.Done]). The limiter renews
// the slot's lease while the request runs, so a slow request keeps its
// slot, and the slots of a process that dies are free again within
// c.Lease (see [core.ConcurrencyLimit]). A request the rate limits deny
// takes no slot; one the cap refuses has spent its rate tokens.
//
// A refusal is answered as a denial: 429 (or the deny handler, whose
// core.Result is the rate limits' decision with Allowed false and
// RetryAfter one second), with Retry-After: 1, as no one can tell when a
// slot frees, plus any [WithRetryJitter]. The cap is named in the header
// fields (see [HeaderStyle]) and in a problem body's violated-policies by
// its Name, or "concurrency-<Max>". [WithWait] waits for rate tokens only:
// a full cap refuses at once. Under [WithDryRun] requests take and give
// back slots as usual but are never refused; the dry-run handler is told
// of a would-be refusal (see [DryRunReport]).
//
// The slots are counted in the buckets' scope: per route by default, and
// middlewares share them only when they share a scope (see [WithScope]), a
// cap and a key. While the store is unavailable the cap follows the limiter's
// failure policy: under core.FallbackLocal each replica admits at most its
// share of Max, core.FailOpen admits without counting, and
// core.FailClosed fails the request (503). A slot whose release fails
// frees itself within its lease; the first such failure is logged once.
//
// The constructor fails (an adapter panics) on an invalid cap, with an
// error wrapping [core.ErrInvalidLimit].
//
// Default: no cap.
func WithConcurrency[C, H any](c core.ConcurrencyLimit) Option[C, H] {
	return func(cfg *Config[C, H]) { cfg.conc, cfg.concSet = c, true }
}

// WithPerRoute makes the middleware count each route it guards apart: its
// buckets are named by the request's route, as [keyfunc.Route] names it
// ("route:GET /items/:id"; HEAD counts as GET), so a middleware registered
// for a group (gin's r.Use, echo's e.Use or g.Use, fiber's App.Use,
// httplimit around an http.ServeMux, a gRPC interceptor) gives every route
// a budget of its own per key. Every request that matched no route, or
// whose route the middleware cannot see, counts in one scope,
// "route:unmatched", never one per path. A middleware that runs before the
// router matched the request (fiber's App.Use, or httplimit around a
// router other than http.ServeMux) sees no route; the first time a
// per-route middleware sees a request without a route before any with
// one, it logs a warning once, naming [WithRoute] as the fix for a router
// that reports no pattern (gorilla/mux, httprouter).
//
// With it off, the middleware is one budget per key across every route it
// guards, wherever it is mounted: r.Use(New(lim, core.PerMinute(600), key))
// allows 600 a minute per key across the service, and a middleware mounted
// on one route counts for that route. No framework tells a middleware
// whether it was mounted on a group or on a route, so this is the one
// place where that choice is made. Two middlewares with the same limits and
// no scope share one budget per key: the first time both have seen
// requests, on different routes, for keys of one kind, one warning names
// both routes and the fix ([WithScope] or WithPerRoute(true)). The
// constructor fails (an adapter panics) when it is true beside [WithScope]
// or [WithRoute].
//
// Default: false: one budget per key across the middleware's routes.
func WithPerRoute[C, H any](on bool) Option[C, H] {
	return func(c *Config[C, H]) { c.perRoute = on }
}

// WithRoute names the one route the middleware guards, for routers that
// do not report a route pattern (gorilla/mux, julienschmidt/httprouter):
// the middleware counts in the buckets a per-route middleware
// ([WithPerRoute]) on a router that reports patterns would use, named
// "route:" + pattern. Write the pattern as keyfunc.Route writes a route,
// the method first: WithRoute("GET /orders/{id}"). Two middlewares with the
// same limits and different routes then keep apart budgets, and keep them
// when the service moves to a router that reports patterns. Mount such a
// middleware on its route only. The constructor fails (an adapter panics)
// on an empty pattern, or beside [WithScope] or WithPerRoute(true).
//
// Default: none; see [WithPerRoute].
func WithRoute[C, H any](pattern string) Option[C, H] {
	return func(c *Config[C, H]) { c.route, c.routeSet = pattern, true }
}

// checkEnforce validates cfg's WithEnforce and reports whether it makes a
// canary: a fraction below 1.
// checkWarning validates WithWarning, and returns its threshold (0 for
// none).
func checkWarning[C, H any](cfg *Config[C, H]) (float64, error) {
	switch at := cfg.warnAt; {
	case !cfg.warnSet:
		return 0, nil
	case !(at > 0 && at <= 1):
		return 0, fmt.Errorf("WithWarning: threshold %v is not in (0, 1]", at)
	case cfg.pathSet:
		return 0, errors.New("WithWarning cannot be used with WithPath yet: a path's levels have no warning threshold")
	}
	return cfg.warnAt, nil
}

func checkEnforce[C, H any](cfg *Config[C, H]) (bool, error) {
	if !cfg.enforceOn {
		return false, nil
	}
	if f := cfg.enforce; !(f >= 0 && f <= 1) {
		return false, fmt.Errorf("WithEnforce: fraction %v is not from 0 to 1", f)
	}
	return cfg.enforce < 1, nil
}

// checkShadow validates cfg's WithShadowLimits.
func checkShadow[C, H any](cfg *Config[C, H]) error {
	switch {
	case len(cfg.shadow) == 0:
		return nil
	case len(cfg.shadow) > core.MaxLimits:
		return fmt.Errorf("WithShadowLimits: %d limits, at most %d", len(cfg.shadow), core.MaxLimits)
	case cfg.leaseSet:
		return errors.New("WithShadowLimits cannot be used with WithTokenLeases: a leased admission asks no store, so it could not decide them")
	case cfg.pathSet:
		return errors.New("WithShadowLimits cannot be used with WithPath yet: a path's levels have no shadow limits")
	}
	for i, l := range cfg.shadow {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("WithShadowLimits: limit %d: %w", i, err)
		}
	}
	return nil
}
