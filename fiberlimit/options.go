package fiberlimit

import (
	"context"

	"github.com/gofiber/fiber/v2"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// Option configures the middleware that [New] returns: the options every
// adapter shares, defined once in package policy, and this package's deny
// and error handlers. When an option is passed twice, the last one wins. A
// nil Option makes New panic.
//
// The status [WithChargeIf] and [WithFinalCost] see is the one set once
// c.Next returns (200 when none was), or, when the chain returns an error,
// the one the app's ErrorHandler answers it with by default (a
// *fiber.Error's Code, found with errors.As, or 500); 500 when the chain
// panics. [WithFinalCost]'s function gets the request's *fiber.Ctx once
// c.Next has returned, and the response's status and header fields. fiber
// sends the response after its handlers, so the rate-limit fields are
// always rewritten to describe the bucket after the settlement; a body
// streamed by a stream writer is sent after it, so its size cannot be the
// final cost.
type Option = policy.Option[*fiber.Ctx, Handlers]

// Handlers holds the settings only this adapter has: the deny and error
// handlers, set with [WithDenyHandler] and [WithErrorHandler]. It is the
// second type parameter of [Option]; its fields are not for use outside
// the package.
type Handlers struct {
	deny    func(*fiber.Ctx, core.Result) error
	onError func(*fiber.Ctx, error) error
}

// SetCost records the final cost of the request whose context is ctx, for
// a middleware with [WithFinalCost]: a handler passes c.UserContext(), the
// user context the middleware gives the handlers after it. See
// [policy.SetCost].
func SetCost(ctx context.Context, n int) bool { return policy.SetCost(ctx, n) }

// WithDenyHandler sets the handler that answers denied requests; the
// middleware returns what f returns, and never calls the next handler. The
// rate-limit fields and Retry-After are already set on the response when f
// runs; res says when to retry. f must be safe for concurrent use. A nil f
// restores the default.
//
// Default: a *fiber.Error with status 429, for the app's ErrorHandler.
func WithDenyHandler(f func(c *fiber.Ctx, res core.Result) error) Option {
	return func(c *policy.Config[*fiber.Ctx, Handlers]) { c.Adapter.deny = f }
}

// WithErrorHandler sets the handler that answers requests that could not be
// decided: err wraps [keyfunc.ErrNoKey], [policy.ErrDenyList] (a deny list
// refused it), [core.ErrUnavailable],
// [core.ErrInvalidLimit] or the user context's error. Do not send err's
// text to the client. The middleware returns what f returns, and calls the
// next handler only if f does. f must be safe for concurrent use. A nil f
// restores the default.
//
// Default: a *fiber.Error with status 400 for a missing key, 403 for a deny-listed request, 503 when the
// store is unavailable or the client gave up, 500 otherwise, and the status
// text as its message (see the package documentation).
func WithErrorHandler(f func(c *fiber.Ctx, err error) error) Option {
	return func(c *policy.Config[*fiber.Ctx, Handlers]) { c.Adapter.onError = f }
}

// Key returns a key function over the request's *fiber.Ctx, for keys
// keyfunc's extractors cannot express, such as a path parameter:
//
//	Key(func(c *fiber.Ctx) (string, error) { return "item:" + c.Params("id"), nil })
//
// It is [policy.NativeKey] for fiber: give the key a prefix of your own, and
// return an error wrapping [keyfunc.ErrNoKey] (400) when the request has
// none. Used in another framework's middleware it fails every request
// (500, logged once).
func Key(f func(*fiber.Ctx) (string, error)) keyfunc.Func { return policy.NativeKey(f) }
