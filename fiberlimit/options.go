package fiberlimit

import (
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// Option configures the middleware that [New] returns. When an option is
// passed twice, the last one wins. A nil Option makes New panic.
type Option func(*options)

type options struct {
	policy  []core.PolicyOption
	deny    func(*fiber.Ctx, core.Result) error
	onError func(*fiber.Ctx, error) error
	problem bool
}

// WithSkip exempts requests for which f reports true, such as health checks
// or an allowlist: they pass without a decision and without rate-limit
// fields. f must be safe for concurrent use. A nil f skips nothing.
//
// Default: none skipped.
func WithSkip(f func(*fiber.Ctx) bool) Option {
	var g func(keyfunc.Request) bool
	if f != nil {
		g = func(r keyfunc.Request) bool { return f(r.(request).c) }
	}
	return policy(core.WithSkip(g))
}

// WithCost sets each request's cost in tokens. A cost below 1 or above the
// limit's Burst fails the request (500 by default); it never passes
// unlimited. f must be safe for concurrent use. A nil f costs 1.
//
// Default: 1 per request.
func WithCost(f func(*fiber.Ctx) int) Option {
	var g func(keyfunc.Request) int
	if f != nil {
		g = func(r keyfunc.Request) int { return f(r.(request).c) }
	}
	return policy(core.WithCost(g))
}

// WithLimitFunc chooses the limit per request, replacing the one given to
// [New], for example by the tenant's plan. An error from f fails the
// request like a key error (400 when it wraps [keyfunc.ErrNoKey], else
// 500). Limits from [WithLimits] still apply. The limiter keeps the limits
// it sees, so a Name taken from the request must be copied (with
// strings.Clone), never fiber's own buffer. f must be safe for concurrent
// use. A nil f uses New's limit.
//
// Default: the limit given to New.
func WithLimitFunc(f func(*fiber.Ctx) (core.Limit, error)) Option {
	var g func(keyfunc.Request) (core.Limit, error)
	if f != nil {
		g = func(r keyfunc.Request) (core.Limit, error) { return f(r.(request).c) }
	}
	return policy(core.WithLimitFunc(g))
}

// WithLimits adds limits checked and consumed together with the main one on
// the same key, such as an hourly cap beside a per-second rate. New panics
// if one is invalid.
//
// Default: none.
func WithLimits(more ...core.Limit) Option { return policy(core.WithLimits(more...)) }

// WithHeaders selects the rate-limit fields written on responses (see
// [core.HeaderStyle]). Retry-After is sent on every 429 whatever the style.
// New panics on an unknown style.
//
// Default: [core.HeadersLegacy].
func WithHeaders(style core.HeaderStyle) Option { return policy(core.WithHeaders(style)) }

// WithDryRun makes the middleware decide and set the rate-limit fields as
// usual but let every request through, to try a new limit on live traffic.
//
// Default: false.
func WithDryRun(on bool) Option { return policy(core.WithDryRun(on)) }

// WithWait makes a request that would be denied wait up to max for its
// tokens instead; one whose tokens cannot be due within max is denied at
// once. The user context (fiber.Ctx.UserContext) ends the wait (answered
// 503 by default), but fiber v2 does not cancel it when a client hangs up.
// Zero disables waiting; New panics if max is negative.
//
// Default: 0.
func WithWait(max time.Duration) Option { return policy(core.WithWait(max)) }

// WithProblemJSON makes the default 429 body RFC 9457 problem details
// (application/problem+json) instead of plain status text, and makes the
// middleware answer failures itself with problem details instead of
// returning a *fiber.Error, which fiber's error handler would render as
// plain text.
//
// Default: false.
func WithProblemJSON(on bool) Option {
	return func(o *options) {
		o.problem = on
		o.policy = append(o.policy, core.WithProblemJSON(on))
	}
}

// WithDenyHandler sets the handler that answers denied requests; the
// middleware returns what f returns, and never calls the next handler. The
// rate-limit fields and Retry-After are already set on the response when f
// runs; res says when to retry. f must be safe for concurrent use. A nil f
// restores the default.
//
// Default: 429 with the status text as a plain-text body.
func WithDenyHandler(f func(c *fiber.Ctx, res core.Result) error) Option {
	return func(o *options) { o.deny = f }
}

// WithErrorHandler sets the handler that answers requests that could not be
// decided: err wraps [keyfunc.ErrNoKey], [core.ErrUnavailable],
// [core.ErrInvalidLimit] or the user context's error. Do not send err's
// text to the client. The middleware returns what f returns, and calls the
// next handler only if f does. f must be safe for concurrent use. A nil f
// restores the default.
//
// Default: a *fiber.Error with status 400 for a missing key, 503 when the
// store is unavailable or the client gave up, 500 otherwise, and the status
// text as its message (see the package documentation).
func WithErrorHandler(f func(c *fiber.Ctx, err error) error) Option {
	return func(o *options) { o.onError = f }
}

func policy(opt core.PolicyOption) Option {
	return func(o *options) { o.policy = append(o.policy, opt) }
}
