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
type Option = policy.Option[*http.Request, Handlers]

// Handlers holds the settings only this adapter has: the deny and error
// handlers, set with [WithDenyHandler] and [WithErrorHandler]. It is the
// second type parameter of [Option]; its fields are not for use outside
// the package.
type Handlers struct {
	deny    func(http.ResponseWriter, *http.Request, core.Result)
	onError func(http.ResponseWriter, *http.Request, error)
}

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
	return func(c *policy.Config[*http.Request, Handlers]) { c.Adapter.deny = f }
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
	return func(c *policy.Config[*http.Request, Handlers]) { c.Adapter.onError = f }
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
