package fiberlimit

import (
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// New returns fiber middleware that limits requests by key under limit, on
// lim. One Limiter serves any number of middlewares; each names its own
// limit and key function. The middleware is safe for concurrent use.
//
// Each request is run through a [policy.Policy] with the context's user
// context (fiber.Ctx.UserContext): admitted requests get the rate-limit
// fields and go on to the next handler; denied ones get the fields,
// Retry-After and the deny handler (see [WithDenyHandler]); requests that
// cannot be decided get the error handler (see [WithErrorHandler]). See the
// package documentation for the default answers.
//
// With [WithConcurrency], an admitted request holds a slot of its key until
// c.Next returns or panics, and gives it back then (see
// [policy.Verdict.Done]).
//
// New panics, with a message that begins "fiberlimit: ", when lim or key is
// nil, when limit, a limit from [WithLimits] or the cap of
// [WithConcurrency] is invalid (the panic value then wraps
// [core.ErrInvalidLimit]), when [WithWait] is negative or set beside
// [WithChargeIf] or [WithFinalCost], when [WithHeaders]
// names an unknown style, or when an option is nil.
func New(lim *core.Limiter, limit core.Limit, key keyfunc.Func, opts ...Option) fiber.Handler {
	mw, err := Build(lim, limit, key, opts...)
	if err != nil {
		panic(err)
	}
	return mw
}

// Build is [New] returning its error instead of panicking, for limits and
// options read from configuration, where a bad value is an input error
// rather than a programming mistake. The error begins "fiberlimit: " and, for
// an invalid limit, wraps [core.ErrInvalidLimit].
func Build(lim *core.Limiter, limit core.Limit, key keyfunc.Func, opts ...Option) (fiber.Handler, error) {
	p, o, err := policy.New(lim, limit, key, native, opts...)
	if err != nil {
		return nil, fmt.Errorf("fiberlimit: %w", err)
	}
	return func(c *fiber.Ctx) error {
		v := p.Decide(c.UserContext(), request{c})
		switch v.Action {
		case policy.Continue:
			v.Headers(c.Set)
			if v.Settles() {
				return serveSettled(c, v)
			}
			defer v.Done() // also when the chain panics
			return c.Next()
		case policy.Deny:
			v.Headers(c.Set)
			if o.deny != nil {
				return o.deny(c, v.Result)
			}
			if !p.ProblemJSON() {
				// Through the app's ErrorHandler; the fields above stay
				// on the response.
				return fiber.NewError(v.Status)
			}
		default:
			if o.onError != nil {
				return o.onError(c, v.Err)
			}
			if !p.ProblemJSON() {
				// Not wrapped: fiber's default error handler writes the
				// error's whole text.
				return fiber.NewError(v.Status)
			}
		}
		ct, body := v.Body()
		c.Set(fiber.HeaderContentType, ct)
		return c.Status(v.Status).Send(body)
	}, nil
}

// native is the framework's request behind the view a policy is given.
func native(r keyfunc.Request) *fiber.Ctx { return r.(request).c }
