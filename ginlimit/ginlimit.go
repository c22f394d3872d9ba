package ginlimit

import (
	"fmt"

	"github.com/gin-gonic/gin"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// New returns gin middleware that limits requests by key under limit, on
// lim. One Limiter serves any number of middlewares; each names its own
// limit and key function. The middleware is safe for concurrent use.
//
// Each request is run through a [policy.Policy] with the request's context:
// admitted requests get the rate-limit fields and go on down the chain;
// denied ones get the fields, Retry-After and the deny handler (see
// [WithDenyHandler]); requests that cannot be decided get the error handler
// (see [WithErrorHandler]). Both abort the chain. See the package
// documentation for the default answers.
//
// With [WithConcurrency], an admitted request holds a slot of its key until
// the rest of the chain returns or panics, and gives it back then (see
// [policy.Verdict.Done]).
//
// New panics, with a message that begins "ginlimit: ", when lim or key is
// nil, when limit, a limit from [WithLimits] or the cap of
// [WithConcurrency] is invalid (the panic value then wraps
// [core.ErrInvalidLimit]), when [WithWait] is negative or set beside
// [WithChargeIf] or [WithFinalCost], when [WithHeaders]
// names an unknown style, or when an option is nil.
func New(lim *core.Limiter, limit core.Limit, key keyfunc.Func, opts ...Option) gin.HandlerFunc {
	mw, err := Build(lim, limit, key, opts...)
	if err != nil {
		panic(err)
	}
	return mw
}

// Build is [New] returning its error instead of panicking, for limits and
// options read from configuration, where a bad value is an input error
// rather than a programming mistake. The error begins "ginlimit: " and, for
// an invalid limit, wraps [core.ErrInvalidLimit].
func Build(lim *core.Limiter, limit core.Limit, key keyfunc.Func, opts ...Option) (gin.HandlerFunc, error) {
	p, o, err := policy.New(lim, limit, key, native, opts...)
	if err != nil {
		return nil, fmt.Errorf("ginlimit: %w", err)
	}
	return func(c *gin.Context) {
		v := p.Decide(c.Request.Context(), request{c})
		switch v.Action {
		case policy.Continue:
			v.WriteHeaders(c.Writer.Header())
			if v.Settles() {
				serveSettled(c, v)
				return
			}
			defer v.Done() // also when the chain panics
			c.Next()
			return
		case policy.Deny:
			v.WriteHeaders(c.Writer.Header())
			if o.deny != nil {
				o.deny(c, v.Result)
				c.Abort()
				return
			}
		default:
			if o.onError != nil {
				o.onError(c, v.Err)
				c.Abort()
				return
			}
			_ = c.Error(v.Err)
		}
		ct, body := v.Body()
		c.Abort()
		c.Data(v.Status, ct, body)
	}, nil
}

// native is the framework's request behind the view a policy is given.
func native(r keyfunc.Request) *gin.Context { return r.(request).c }
