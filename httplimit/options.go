package httplimit

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// Option configures the middleware that [New] returns: the options every
// adapter shares, defined once in package policy, and this package's deny
// and error handlers. When an option is passed twice, the last one wins. A
// nil Option makes New panic.
type Option = policy.Option[*http.Request, handlers]

// handlers holds the settings only this adapter has.
type handlers struct {
	deny    func(http.ResponseWriter, *http.Request, core.Result)
	onError func(http.ResponseWriter, *http.Request, error)
}

// The options every adapter shares, each documented in package policy.
// Those that take a function pass it the *http.Request.
var (
	// WithSkip is [policy.WithSkip].
	WithSkip = policy.WithSkip[*http.Request, handlers]
	// WithCost is [policy.WithCost].
	WithCost = policy.WithCost[*http.Request, handlers]
	// WithLimitFunc is [policy.WithLimitFunc].
	WithLimitFunc = policy.WithLimitFunc[*http.Request, handlers]
	// WithLimits is [policy.WithLimits].
	WithLimits = policy.WithLimits[*http.Request, handlers]
	// WithHeaders is [policy.WithHeaders].
	WithHeaders = policy.WithHeaders[*http.Request, handlers]
	// WithDryRun is [policy.WithDryRun].
	WithDryRun = policy.WithDryRun[*http.Request, handlers]
	// WithDryRunHandler is [policy.WithDryRunHandler].
	WithDryRunHandler = policy.WithDryRunHandler[*http.Request, handlers]
	// WithWait is [policy.WithWait].
	WithWait = policy.WithWait[*http.Request, handlers]
	// WithProblemJSON is [policy.WithProblemJSON].
	WithProblemJSON = policy.WithProblemJSON[*http.Request, handlers]
	// WithScope is [policy.WithScope].
	WithScope = policy.WithScope[*http.Request, handlers]
	// WithPenalty is [policy.WithPenalty].
	WithPenalty = policy.WithPenalty[*http.Request, handlers]
	// WithConcurrency is [policy.WithConcurrency].
	WithConcurrency = policy.WithConcurrency[*http.Request, handlers]
	// WithQuotaUnit is [policy.WithQuotaUnit].
	WithQuotaUnit = policy.WithQuotaUnit[*http.Request, handlers]
	// WithRetryJitter is [policy.WithRetryJitter].
	WithRetryJitter = policy.WithRetryJitter[*http.Request, handlers]
	// WithAllow is [policy.WithAllow].
	WithAllow = policy.WithAllow[*http.Request, handlers]
	// WithDeny is [policy.WithDeny].
	WithDeny = policy.WithDeny[*http.Request, handlers]
	// WithListClientIP is [policy.WithListClientIP].
	WithListClientIP = policy.WithListClientIP[*http.Request, handlers]
	// WithOverrides is [policy.WithOverrides].
	WithOverrides = policy.WithOverrides[*http.Request, handlers]
	// WithChargeIf is [policy.WithChargeIf].
	WithChargeIf = policy.WithChargeIf[*http.Request, handlers]
	// WithFinalCost is [policy.WithFinalCost].
	WithFinalCost = policy.WithFinalCost[*http.Request, handlers]
)

// SetCost records the final cost of the request whose context is ctx, for
// a middleware with [WithFinalCost]; see [policy.SetCost].
func SetCost(ctx context.Context, n int) bool { return policy.SetCost(ctx, n) }

// WithDenyHandler sets the handler that answers denied requests. The
// rate-limit fields and Retry-After are already set on w when it runs; res
// says when to retry. f must be safe for concurrent use. A nil f restores
// the default.
//
// Default: 429 with the status text as a plain-text body.
func WithDenyHandler(f func(w http.ResponseWriter, r *http.Request, res core.Result)) Option {
	return func(c *policy.Config[*http.Request, handlers]) { c.Adapter.deny = f }
}

// WithErrorHandler sets the handler that answers requests that could not be
// decided: err wraps [keyfunc.ErrNoKey], [policy.ErrDenyList] (a deny list
// refused it), [core.ErrUnavailable],
// [core.ErrInvalidLimit] or the request's context error. Do not send err's
// text to the client. f must be safe for concurrent use. A nil f restores
// the default.
//
// Default: 400 for a missing key, 403 for a deny-listed request, 503 when
// the store is unavailable or the client gave up, 500 otherwise, with the
// status text as the body.
func WithErrorHandler(f func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(c *policy.Config[*http.Request, handlers]) { c.Adapter.onError = f }
}

// Key returns a key function over the request's *http.Request, for keys
// keyfunc's extractors cannot express, such as a path parameter:
//
//	Key(func(r *http.Request) (string, error) { return "item:" + r.PathValue("id"), nil })
//
// It is [policy.NativeKey] for net/http: give the key a prefix of your own, and
// return an error wrapping [keyfunc.ErrNoKey] (400) when the request has
// none. Used in another framework's middleware it fails every request
// (500, logged once).
func Key(f func(*http.Request) (string, error)) keyfunc.Func { return policy.NativeKey(f) }
