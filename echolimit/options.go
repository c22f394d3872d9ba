package echolimit

import (
	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// Option configures the middleware that [New] returns: the options every
// adapter shares, defined once in package policy, and this package's deny
// and error handlers. When an option is passed twice, the last one wins. A
// nil Option makes New panic.
type Option = policy.Option[echo.Context, handlers]

// handlers holds the settings only this adapter has.
type handlers struct {
	deny    func(echo.Context, core.Result) error
	onError func(echo.Context, error) error
}

// The options every adapter shares, each documented in package policy.
// Those that take a function pass it the request's echo.Context.
var (
	// WithSkip is [policy.WithSkip].
	WithSkip = policy.WithSkip[echo.Context, handlers]
	// WithCost is [policy.WithCost].
	WithCost = policy.WithCost[echo.Context, handlers]
	// WithLimitFunc is [policy.WithLimitFunc].
	WithLimitFunc = policy.WithLimitFunc[echo.Context, handlers]
	// WithLimits is [policy.WithLimits].
	WithLimits = policy.WithLimits[echo.Context, handlers]
	// WithHeaders is [policy.WithHeaders].
	WithHeaders = policy.WithHeaders[echo.Context, handlers]
	// WithDryRun is [policy.WithDryRun].
	WithDryRun = policy.WithDryRun[echo.Context, handlers]
	// WithDryRunHandler is [policy.WithDryRunHandler].
	WithDryRunHandler = policy.WithDryRunHandler[echo.Context, handlers]
	// WithWait is [policy.WithWait].
	WithWait = policy.WithWait[echo.Context, handlers]
	// WithProblemJSON is [policy.WithProblemJSON].
	WithProblemJSON = policy.WithProblemJSON[echo.Context, handlers]
	// WithScope is [policy.WithScope].
	WithScope = policy.WithScope[echo.Context, handlers]
	// WithConcurrency is [policy.WithConcurrency].
	WithConcurrency = policy.WithConcurrency[echo.Context, handlers]
	// WithQuotaUnit is [policy.WithQuotaUnit].
	WithQuotaUnit = policy.WithQuotaUnit[echo.Context, handlers]
	// WithRetryJitter is [policy.WithRetryJitter].
	WithRetryJitter = policy.WithRetryJitter[echo.Context, handlers]
)

// WithDenyHandler sets the handler that answers denied requests; the
// middleware returns what f returns, and never calls the next handler. The
// rate-limit fields and Retry-After are already set on the response when f
// runs; res says when to retry. f must be safe for concurrent use. A nil f
// restores the default.
//
// Default: a *echo.HTTPError with status 429, for the app's HTTPErrorHandler.
func WithDenyHandler(f func(c echo.Context, res core.Result) error) Option {
	return func(c *policy.Config[echo.Context, handlers]) { c.Adapter.deny = f }
}

// WithErrorHandler sets the handler that answers requests that could not be
// decided: err wraps [keyfunc.ErrNoKey], [core.ErrUnavailable],
// [core.ErrInvalidLimit] or the request's context error. Do not send err's
// text to the client. The middleware returns what f returns, and calls the
// next handler only if f does. f must be safe for concurrent use. A nil f
// restores the default.
//
// Default: an *echo.HTTPError with status 400 for a missing key, 503 when
// the store is unavailable or the client gave up, 500 otherwise, the status
// text as its message and err as its Internal error (see the package
// documentation).
func WithErrorHandler(f func(c echo.Context, err error) error) Option {
	return func(c *policy.Config[echo.Context, handlers]) { c.Adapter.onError = f }
}

// Key returns a key function over the request's echo.Context, for keys
// keyfunc's extractors cannot express, such as a path parameter:
//
//	Key(func(c echo.Context) (string, error) { return "item:" + c.Param("id"), nil })
//
// It is [policy.NativeKey] for echo: give the key a prefix of your own, and
// return an error wrapping [keyfunc.ErrNoKey] (400) when the request has
// none. Used in another framework's middleware it fails every request
// (500, logged once).
func Key(f func(echo.Context) (string, error)) keyfunc.Func { return policy.NativeKey(f) }
