package ginlimit

import (
	"context"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// Option configures the middleware that [New] returns: the options every
// adapter shares, defined once in package policy, and this package's deny
// and error handlers. When an option is passed twice, the last one wins. A
// nil Option makes New panic.
//
// [WithChargeIf]'s predicate gets the status the rest of the chain wrote
// (c.Writer.Status(): 200 when it wrote none, 500 when it panicked); the
// middleware settles just before gin sends the header, so the rate-limit
// fields describe the bucket after a refund. [WithFinalCost]'s function
// gets the request's *gin.Context once the rest of the chain has returned,
// and the response's status and header fields (c.Writer's); the rate-limit
// fields are then rewritten only when nothing was sent yet
// (c.Writer.Written() is false).
type Option = policy.Option[*gin.Context, Handlers]

// Handlers holds the settings only this adapter has: the deny and error
// handlers, set with [WithDenyHandler] and [WithErrorHandler]. It is the
// second type parameter of [Option]; its fields are not for use outside
// the package.
type Handlers struct {
	deny    func(*gin.Context, core.Result)
	onError func(*gin.Context, error)
}

// SetCost records the final cost of the request whose context is ctx, for
// a middleware with [WithFinalCost]: a handler passes
// c.Request.Context(), which the middleware gives the rest of the chain.
// See [policy.SetCost].
func SetCost(ctx context.Context, n int) bool { return policy.SetCost(ctx, n) }

// WithDenyHandler sets the handler that answers denied requests. The
// rate-limit fields and Retry-After are already set on the response when it
// runs; res says when to retry. The chain is aborted after f returns. f
// must be safe for concurrent use. A nil f restores the default.
//
// Default: 429 with the status text as a plain-text body.
func WithDenyHandler(f func(c *gin.Context, res core.Result)) Option {
	return func(c *policy.Config[*gin.Context, Handlers]) { c.Adapter.deny = f }
}

// WithErrorHandler sets the handler that answers requests that could not be
// decided: err wraps [keyfunc.ErrNoKey], [policy.ErrDenyList] (a deny list
// refused it), [core.ErrUnavailable],
// [core.ErrInvalidLimit] or the request's context error. Do not send err's
// text to the client. The chain is aborted after f returns, so f must call
// c.Next itself to let the request through anyway. f must be safe for
// concurrent use. A nil f restores the default.
//
// Default: the error is recorded with c.Error, and the answer is 400 for a
// missing key, 403 for a deny-listed request, 503 when the store is unavailable or the client gave up, and
// 500 otherwise, with the status text as the body.
func WithErrorHandler(f func(c *gin.Context, err error)) Option {
	return func(c *policy.Config[*gin.Context, Handlers]) { c.Adapter.onError = f }
}

// Key returns a key function over the request's *gin.Context, for keys
// keyfunc's extractors cannot express, such as a path parameter:
//
//	Key(func(c *gin.Context) (string, error) { return "item:" + c.Param("id"), nil })
//
// It is [policy.NativeKey] for gin: give the key a prefix of your own, and
// return an error wrapping [keyfunc.ErrNoKey] (400) when the request has
// none. Used in another framework's middleware it fails every request
// (500, logged once).
func Key(f func(*gin.Context) (string, error)) keyfunc.Func { return policy.NativeKey(f) }
