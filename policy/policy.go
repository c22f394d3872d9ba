package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// Policy decides requests for one middleware: its limit, key function and
// options. A Policy is safe for concurrent use. Create one with [New].
type Policy struct {
	lim     *core.Limiter
	said    sync.Map     // failure texts already logged -> struct{}
	saidN   atomic.Int32 // how many
	key     keyfunc.Func
	limit   core.Limit // the main limit, unless WithLimitFunc or an override chooses
	rules   ruleCache
	skip    func(keyfunc.Request) bool
	cost    func(keyfunc.Request) int
	limitFn func(keyfunc.Request) (core.Limit, error)
	headers HeaderStyle
	dryRun  bool
	report  func(keyfunc.Request, DryRunReport) // nil: none
	wait    time.Duration
	problem bool
	jitter  time.Duration  // WithRetryJitter's bound
	cap     *capRule       // WithConcurrency's cap; nil: none
	settle  *settler       // WithChargeIf and WithFinalCost; nil: charge before the handler
	lists   *lists         // WithAllow, WithDeny, WithOverrides' entries; nil: none
	ovr     *overrideRules // WithOverrides; nil: none
	path    *pathSet       // WithPath; nil: one key
	mount   *mount         // where a middleware without a scope is mounted; nil: it has one (see sharing.go)
	matched atomic.Bool    // per route: a request with a route was seen
	blind   atomic.Bool    // per route: the warning of a middleware that sees no route was logged
	rec     Recorder       // WithRecord; nil: none
}

// New returns the policy limiting requests by key under limit on lim,
// configured by opts, and the adapter's own settings as the options left
// them. native turns the request view the adapter passes to
// [Policy.Decide] back into the framework's request, for the options that
// take a function of it; it must not allocate.
//
// New returns an error for a nil limiter, key function or option, an
// invalid limit or extra limit (wrapping [core.ErrInvalidLimit]), a
// negative wait or jitter, an unknown header style, an empty WithScope or
// WithRoute, two of WithScope, WithRoute and WithPerRoute(true), a
// WithPenalty out of range,
// an invalid WithConcurrency cap (wrapping [core.ErrInvalidLimit]), or
// WithDryRunHandler without WithDryRun(true) or a WithEnforce below 1, a
// WithEnforce fraction that is NaN or outside [0, 1], or WithShadowLimits
// with more than core.MaxLimits limits, an invalid one (wrapping
// [core.ErrInvalidLimit]), or beside WithTokenLeases or WithPath.
// Adapters panic with it, as their constructors document.
func New[C, H any](lim *core.Limiter, limit core.Limit, key keyfunc.Func, native func(keyfunc.Request) C, opts ...Option[C, H]) (*Policy, H, error) {
	var cfg Config[C, H]
	for i, opt := range opts {
		if opt == nil {
			return nil, cfg.Adapter, fmt.Errorf("option %d is nil", i)
		}
		opt(&cfg)
	}
	if lim == nil {
		return nil, cfg.Adapter, errors.New("nil Limiter")
	}
	if key == nil {
		return nil, cfg.Adapter, errors.New("nil key function")
	}
	if cfg.wait < 0 {
		return nil, cfg.Adapter, fmt.Errorf("WithWait: negative duration %s", cfg.wait)
	}
	if cfg.headers < HeadersLegacy || cfg.headers > HeadersNone {
		return nil, cfg.Adapter, fmt.Errorf("WithHeaders: unknown style %d", cfg.headers)
	}
	if err := checkScope(&cfg); err != nil {
		return nil, cfg.Adapter, err
	}
	if cfg.penSet && (cfg.penalty < 0 || cfg.penalty > core.MaxPenalty) {
		return nil, cfg.Adapter, fmt.Errorf("WithPenalty: %s is not from 0 to %s", cfg.penalty, core.MaxPenalty)
	}
	if cfg.unit != "" && !slices.Contains(quotaUnits, cfg.unit) {
		return nil, cfg.Adapter, fmt.Errorf("WithQuotaUnit: unknown unit %q, want one the draft registers: %s", cfg.unit, strings.Join(quotaUnits, ", "))
	}
	canary, err := checkEnforce(&cfg)
	if err != nil {
		return nil, cfg.Adapter, err
	}
	warnAt, err := checkWarning(&cfg)
	if err != nil {
		return nil, cfg.Adapter, err
	}
	if cfg.report != nil && !cfg.dryRun && !canary {
		return nil, cfg.Adapter, errors.New("WithDryRunHandler without WithDryRun(true) or a WithEnforce below 1: the handler is told only about dry-run decisions")
	}
	if err := checkRetryJitter(cfg.jitter); err != nil {
		return nil, cfg.Adapter, err
	}
	if (cfg.chargeIf != nil || cfg.finalSet) && cfg.wait > 0 {
		return nil, cfg.Adapter, errSettleWait
	}
	if err := checkShadow(&cfg); err != nil {
		return nil, cfg.Adapter, err
	}
	if cfg.leaseSet && cfg.pathSet {
		return nil, cfg.Adapter, errors.New("WithTokenLeases cannot be used with WithPath: a path is decided level by level in one Redis call")
	}
	var capr *capRule
	if cfg.concSet {
		var err error
		if capr, err = newCapRule(lim, cfg.conc); err != nil {
			return nil, cfg.Adapter, fmt.Errorf("WithConcurrency: %w", err)
		}
	}
	scope := cfg.scope
	if cfg.routeSet {
		scope = "route:" + cfg.route
	}
	p := &Policy{lim: lim, key: key, rules: ruleCache{lim: lim, extra: cfg.extra, set: ruleSettings{scope: scope, perRoute: cfg.perRoute, dryRun: cfg.dryRun, unit: cfg.unit, cap: capr, penalty: cfg.penalty, penaltySet: cfg.penSet}}, headers: cfg.headers,
		dryRun: cfg.dryRun, wait: cfg.wait, problem: cfg.problem}
	if canary {
		p.rules.set.canary, p.rules.set.enforce = true, cfg.enforce
	}
	p.rules.set.warn = warnAt
	p.jitter, p.cap, p.rec = cfg.jitter, capr, cfg.rec
	p.rules.set.shadow = cfg.shadow
	if cfg.leaseSet {
		b := cfg.leases
		p.rules.set.leases = &b
	}
	if err := initLists(p, &cfg); err != nil {
		return nil, cfg.Adapter, err
	}
	ps, err := checkPath(&cfg)
	if err != nil {
		return nil, cfg.Adapter, err
	}
	if err := checkShare(&cfg, lim, append([]core.Limit{limit}, cfg.extra...), ps); err != nil {
		return nil, cfg.Adapter, err
	}
	p.path = ps
	if f := cfg.report; f != nil {
		p.report = func(r keyfunc.Request, rep DryRunReport) { f(native(r), rep) }
	}
	if f := cfg.skip; f != nil {
		p.skip = func(r keyfunc.Request) bool { return f(native(r)) }
	}
	if f := cfg.cost; f != nil {
		p.cost = func(r keyfunc.Request) int { return f(native(r)) }
	}
	if cfg.chargeIf != nil || cfg.finalSet {
		p.settle = &settler{chargeIf: cfg.chargeIf, box: cfg.finalSet, lim: lim}
		if f := cfg.finalCost; f != nil {
			p.settle.finalCost = func(r keyfunc.Request, resp Response) int { return f(native(r), resp) }
		}
	}
	if f := cfg.limitFn; f != nil {
		p.limitFn = func(r keyfunc.Request) (core.Limit, error) { return f(native(r)) }
	}
	// Prepare the limits once, to refuse bad ones now; per route, the
	// policy prepares them for each route as requests come.
	if _, err := newRule(lim, p.rules.set, scope, append([]core.Limit{limit}, cfg.extra...)); err != nil {
		return nil, cfg.Adapter, err
	}
	p.limit = limit
	if !cfg.perRoute && !cfg.scopeSet && !cfg.routeSet {
		p.mount = join(lim, append([]core.Limit{limit}, cfg.extra...))
	}
	return p, cfg.Adapter, nil
}

// ProblemJSON reports whether [WithProblemJSON] is on: an adapter whose
// framework has its own error type returns that error for a failure only
// when it is off.
func (p *Policy) ProblemJSON() bool { return p.problem }

// Action is what the adapter must do with a request.
type Action int8

const (
	// Continue passes the request on, after writing the verdict's
	// headers, and calls [Verdict.Done] when the handlers after the
	// middleware return.
	Continue Action = iota
	// Deny answers 429 (or calls the user's deny handler), with the
	// verdict's headers, Retry-After included.
	Deny
	// Fail answers the verdict's Status (or calls the user's error
	// handler with Err).
	Fail
)

// Verdict is a policy's answer for one request.
type Verdict struct {
	// Action says what to do.
	Action Action
	// Result is the limiter's decision; zero when skipped or failed. When
	// the concurrency cap refused the request (see [WithConcurrency]), it
	// is the rate limits' decision with Allowed false and RetryAfter one
	// second.
	Result core.Result
	// Err is why the request failed, for Fail: it wraps
	// [keyfunc.ErrNoKey], [ErrDenyList], [core.ErrUnavailable],
	// [core.ErrInvalidLimit] or a context error.
	Err error
	// Status is the HTTP status of the default answer: 429 for Deny; for
	// Fail 400 (no key), 403 (on a deny list), 503 (store unavailable
	// under FailClosed, or the request gave up while waiting) or 500
	// (anything else); 0 for Continue.
	Status int

	style   HeaderStyle
	rule    *rule
	decided bool
	problem bool
	detail  string          // the problem detail of a Fail: why, never the error's text
	jitter  time.Duration   // added to a Deny's Retry-After (see WithRetryJitter)
	capped  bool            // the concurrency cap refused the request
	lease   *core.Lease     // the slot the request holds; nil: none (see Done)
	settle  *settlement     // the reservation the response settles; nil: none (see Settle)
	ctx     context.Context // the request's, whose values Done keeps
}

// Decide runs the policy for one request. It never panics on request
// content; failures come back as a Verdict with Action Fail. Under
// [WithDryRun] every verdict is Continue, with no rate-limit fields: the
// would-be result and any failure go to the dry-run handler instead. A
// Continue may hold a concurrency slot ([WithConcurrency]): the caller
// defers [Verdict.Done] around what it passes the request on to.
func (p *Policy) Decide(ctx context.Context, r keyfunc.Request) Verdict {
	if p.skip != nil && p.skip(r) {
		return Verdict{Action: Continue}
	}
	key, err := p.key(r)
	if err == nil && key == "" {
		err = fmt.Errorf("policy: the key function returned an empty key: %w", keyfunc.ErrNoKey)
	}
	if err != nil {
		return p.fail(r, key, err, atKey)
	}
	if v, done := p.listed(r, key); done {
		return v
	}
	if m := p.mount; m != nil && m.first.Load() == nil {
		m.note(p.lim, r, key)
	}
	if p.rules.set.perRoute && !p.matched.Load() {
		p.noteUnmatched(r)
	}
	rl := p.overridden(key, r)
	if rl == nil {
		l := p.limit
		if p.limitFn != nil {
			if l, err = p.limitFn(r); err != nil {
				return p.fail(r, key, err, atLimit)
			}
		}
		if rl, err = p.rules.get(l, r); err != nil {
			return p.fail(r, key, err, atLimit)
		}
	}
	n := 1
	if p.cost != nil {
		n = p.cost(r)
	}
	var res core.Result
	var st *settlement
	capKey := key
	var keys []string // a path's
	if p.path != nil {
		var at stage
		if rl, keys, at, err = p.pathOf(r, key, rl); err != nil {
			return p.fail(r, key, err, at)
		}
		capKey = pathKey(keys)
		res, st, err = p.decidePath(ctx, rl, keys, n)
	}
	switch {
	case p.path != nil:
	case p.settle != nil:
		res, st, err = p.reserve(ctx, rl, key, n)
	case p.wait > 0 && rl.engine.Enforced(key): // a dry run does not wait
		res, err = p.waitFor(ctx, key, rl, n)
	default:
		res, err = rl.engine.AllowN(ctx, key, n)
	}
	if err != nil {
		return p.failAs(r, key, err, atDecide, p.dryRun || !rl.enforced(key))
	}
	if p.rec != nil {
		p.record(key, keys, n, res, st)
	}
	// A dry run's, or a key's a canary leaves in dry run (see WithEnforce).
	dry := p.dryRun || res.DryRun
	v := Verdict{Result: res, style: p.headers, rule: rl, decided: !dry, problem: p.problem, settle: st}
	inFlight := 0
	if p.cap != nil && res.Allowed {
		// Only a request the rate limits admit takes a slot.
		ls, err := p.cap.acquire(ctx, rl.slots, capKey)
		if err != nil {
			fv := p.failAs(r, key, err, atDecide, dry)
			status := fv.Status
			if status == 0 { // a dry run lets it go on, but the answer it would have had is this
				status = p.failure(err, atDecide).Status
			}
			st.apply(r, Response{Status: status}) // the request does not run: settled as the failure it is
			return fv
		}
		inFlight = ls.InFlight
		if ls.Acquired {
			v.lease, v.ctx = ls, ctx
		} else {
			v.capped = true
			v.Result.Allowed, v.Result.RetryAfter = false, capRetry
			if !dry {
				// The request does not run: settled as the 429 it gets.
				st.apply(r, Response{Status: 429})
				v.settle = nil
			}
		}
	}
	if dry {
		if p.report != nil {
			p.report(r, DryRunReport{Key: key, Result: v.Result, InFlight: inFlight})
		}
		return Verdict{Action: Continue, Result: v.Result, rule: rl, lease: v.lease, ctx: v.ctx, settle: v.settle}
	}
	if !v.Result.Allowed {
		v.Action, v.Status, v.jitter = Deny, 429, drawJitter(p.jitter)
	}
	return v
}

// DryRunReport is what the dry-run handler is told about one request (see
// [WithDryRunHandler]).
type DryRunReport struct {
	// Key is the request's key; "" when the key function failed.
	Key string
	// Result is the decision the middleware would have enforced, marked
	// DryRun; zero when Err is set.
	Result core.Result
	// Err is why the request could not be decided (a missing key, a bad
	// cost or limit function, the store unavailable under FailClosed),
	// which outside a dry run would have failed it; nil otherwise.
	Err error
	// InFlight is, with [WithConcurrency], how many requests of the key
	// held a slot of the cap once this one had taken its own, or when the
	// cap would have refused it; Result is then not Allowed, with
	// RetryAfter one second, as a refusal's verdict says. So a report
	// with InFlight above 0 and Result not Allowed is a would-be refusal
	// by the cap. InFlight is 0 without a cap, when the rate limits would
	// have denied the request (it then takes no slot), and for a slot
	// granted without counting (core.FailOpen while the store is down).
	InFlight int
}

// waitFor reserves n tokens due within the policy's wait and sleeps until
// they are.
func (p *Policy) waitFor(ctx context.Context, key string, rl *rule, n int) (core.Result, error) {
	wctx, cancel := context.WithTimeout(ctx, p.wait)
	defer cancel()
	res, err := rl.engine.Wait(wctx, key, n)
	if err != nil && res.Allowed && ctx.Err() == nil {
		// Our own bound ended the sleep as the tokens fell due: the
		// reservation stands.
		err = nil
	}
	return res, err
}

// stage says where a request failed: in the key function, in choosing its
// limit, or in the decision (the cost, the store, the request's context).
type stage int8

const (
	atKey stage = iota
	atLimit
	atDecide
)

// fail turns err into the verdict of a request that could not be decided,
// and logs the failure the first time its text is seen (see logOnce).
// Under dry run the request goes on: the handler is told, and the failure
// is logged as it would be outside a dry run.
func (p *Policy) fail(r keyfunc.Request, key string, err error, at stage) Verdict {
	return p.failAs(r, key, err, at, p.dryRun)
}

// failAs is fail for a request decided as a dry run's if dry (see
// WithEnforce: a canary leaves some keys in dry run).
func (p *Policy) failAs(r keyfunc.Request, key string, err error, at stage, dry bool) Verdict {
	v := p.failure(err, at)
	if dry {
		if p.report != nil {
			p.report(r, DryRunReport{Key: key, Err: err})
		}
		return Verdict{Action: Continue}
	}
	return v
}

// failure is the verdict of a request that failed with err at stage at.
func (p *Policy) failure(err error, at stage) Verdict {
	v := Verdict{Action: Fail, Err: err, Status: 500, problem: p.problem, detail: "The rate limiter is misconfigured."}
	fix := ""
	switch {
	case errors.Is(err, keyfunc.ErrNoRoute):
		v.Status, v.detail = 400, "The rate limiter cannot see this request's route."
		fix = "the middleware runs before the router knows the route: attach it to the route itself (in the route's handler list with gin, echo or fiber; around the handler you register with net/http, not around the ServeMux; with chi, r.With(mw) on the route or r.Use inside r.Group), or key by something else"
	case errors.Is(err, keyfunc.ErrNoKey):
		v.Status, v.detail = 400, "The request carries no rate-limit key."
		if at == atLimit {
			fix = "WithLimitFunc returned an error wrapping keyfunc.ErrNoKey"
		}
	case errors.Is(err, ErrDenyList):
		v.Status, v.detail = 403, "The request's key or address is on a deny list."
		return v // the operator's doing, not a misconfiguration
	case errors.Is(err, core.ErrUnavailable):
		v.Status, v.detail = 503, "The rate limiter's store is unavailable."
		return v // the limiter logs outages itself
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		v.Status, v.detail = 503, "The request ended before the rate limiter decided."
		return v // the client's doing
	case at == atKey:
		fix = "the key function returned an error other than keyfunc.ErrNoKey"
	case at == atLimit:
		fix = "WithLimitFunc returned an error or an invalid limit; it must return a valid core.Limit, or an error wrapping keyfunc.ErrNoKey to answer 400"
	case errors.Is(err, core.ErrInvalidLimit):
		fix = "WithCost must return a cost from 1 to the smallest Burst of the limits"
	}
	p.logOnce(err, v.Status, fix)
	return v
}

// maxSaid bounds how many distinct failures one policy logs.
const maxSaid = 32

// logOnce logs a failure the first time its text is seen by this policy,
// at Warn level, with the fix where it is known: a misconfiguration fails
// every request the same way and is then said once, not once per request.
// A policy logs at most maxSaid distinct failures.
func (p *Policy) logOnce(err error, status int, fix string) {
	text := err.Error()
	if p.saidN.Load() >= maxSaid {
		return
	}
	if _, seen := p.said.LoadOrStore(text, struct{}{}); seen {
		return
	}
	p.saidN.Add(1)
	attrs := []any{"status", status, "error", text}
	if fix != "" {
		attrs = append(attrs, "fix", fix)
	}
	p.lim.Logger().Warn("sluice: a request could not be decided; logged once per cause, later ones are answered the same way silently", attrs...)
}
