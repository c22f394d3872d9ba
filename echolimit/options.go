package echolimit

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// Option configures the middleware that [New] returns: the options every
// adapter shares, defined once in package policy, and this package's deny
// and error handlers. When an option is passed twice, the last one wins. A
// nil Option makes New panic.
//
// The status [WithChargeIf] and [WithFinalCost] see is the one written (200
// when none was), or, when next returns an error before anything is
// written, the one the app's HTTPErrorHandler answers it with by default
// (an *echo.HTTPError's Code, found with errors.As, or 500); 500 when next
// panics. With [WithChargeIf] alone, the middleware settles in a
// Response.Before hook as the status is written, so the rate-limit fields
// describe the bucket after a refund. [WithFinalCost]'s function gets the
// request's echo.Context once next has returned, and the response's status
// and header fields; the rate-limit fields are then rewritten only when the
// response is not committed yet, as when next returned an error for the
// app's HTTPErrorHandler to answer.
type Option = policy.Option[echo.Context, Handlers]

// Handlers holds the settings only this adapter has: the deny and error
// handlers, set with [WithDenyHandler] and [WithErrorHandler]. It is the
// second type parameter of [Option]; its fields are not for use outside
// the package.
type Handlers struct {
	deny    func(echo.Context, core.Result) error
	onError func(echo.Context, error) error
}

// SetCost records the final cost of the request whose context is ctx, for
// a middleware with [WithFinalCost]: a handler passes
// c.Request().Context(), which the middleware gives the handlers after it.
// See [policy.SetCost].
func SetCost(ctx context.Context, n int) bool { return policy.SetCost(ctx, n) }

// WithDenyHandler sets the handler that answers denied requests; the
// middleware returns what f returns, and never calls the next handler. The
// rate-limit fields and Retry-After are already set on the response when f
// runs; res says when to retry. f must be safe for concurrent use. A nil f
// restores the default.
//
// Default: a *echo.HTTPError with status 429, for the app's HTTPErrorHandler.
func WithDenyHandler(f func(c echo.Context, res core.Result) error) Option {
	return func(c *policy.Config[echo.Context, Handlers]) { c.Adapter.deny = f }
}

// WithErrorHandler sets the handler that answers requests that could not be
// decided: err wraps [keyfunc.ErrNoKey], [policy.ErrDenyList] (a deny list
// refused it), [core.ErrUnavailable],
// [core.ErrInvalidLimit] or the request's context error. Do not send err's
// text to the client. The middleware returns what f returns, and calls the
// next handler only if f does. f must be safe for concurrent use. A nil f
// restores the default.
//
// Default: an *echo.HTTPError with status 400 for a missing key, 403 for a deny-listed request, 503 when
// the store is unavailable or the client gave up, 500 otherwise, the status
// text as its message and err as its Internal error (see the package
// documentation).
func WithErrorHandler(f func(c echo.Context, err error) error) Option {
	return func(c *policy.Config[echo.Context, Handlers]) { c.Adapter.onError = f }
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
