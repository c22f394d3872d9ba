package echov5limit

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v5"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// New returns echo middleware that limits requests by key under limit, on
// lim. One Limiter serves any number of middlewares; each names its own
// limit and key function. The middleware is safe for concurrent use.
//
// Each request is run through a [policy.Policy] with the request's context:
// admitted requests get the rate-limit fields and go on to the next
// handler; denied ones get the fields, Retry-After and the deny handler
// (see [WithDenyHandler]); requests that cannot be decided get the error
// handler (see [WithErrorHandler]). See the package documentation for the
// default answers.
//
// With [WithConcurrency], an admitted request holds a slot of its key until
// the next handler returns or panics, and gives it back then (see
// [policy.Verdict.Done]).
//
// New panics, with a message that begins "echov5limit: ", when lim or key
// is nil, when limit, a limit from [WithLimits] or the cap of
// [WithConcurrency] is invalid (the panic value then wraps
// [core.ErrInvalidLimit]), when [WithWait] is negative or set beside
// [WithChargeIf] or [WithFinalCost], when [WithHeaders]
// names an unknown style, or when an option is nil.
func New(lim *core.Limiter, limit core.Limit, key keyfunc.Func, opts ...Option) echo.MiddlewareFunc {
	mw, err := Build(lim, limit, key, opts...)
	if err != nil {
		panic(err)
	}
	return mw
}

// Build is [New] returning its error instead of panicking, for limits and
// options read from configuration, where a bad value is an input error
// rather than a programming mistake. The error begins "echov5limit: " and,
// for an invalid limit, wraps [core.ErrInvalidLimit].
func Build(lim *core.Limiter, limit core.Limit, key keyfunc.Func, opts ...Option) (echo.MiddlewareFunc, error) {
	p, o, err := policy.New(lim, limit, key, native, opts...)
	if err != nil {
		return nil, fmt.Errorf("echov5limit: %w", err)
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			v := p.Decide(c.Request().Context(), request{c})
			switch v.Action {
			case policy.Continue:
				v.WriteHeaders(c.Response().Header())
				if v.Settles() {
					return serveSettled(c, next, v)
				}
				defer v.Done() // also when next panics
				return next(c)
			case policy.Deny:
				v.WriteHeaders(c.Response().Header())
				if o.deny != nil {
					return o.deny(c, v.Result)
				}
				if !p.ProblemJSON() {
					// Through the app's error handling; the fields above
					// stay on the response.
					return &echo.HTTPError{Code: v.Status, Message: http.StatusText(v.Status)}
				}
			default:
				if o.onError != nil {
					return o.onError(c, v.Err)
				}
				if !p.ProblemJSON() {
					return echo.HTTPError{Code: v.Status, Message: http.StatusText(v.Status)}.Wrap(v.Err)
				}
			}
			ct, body := v.Body()
			return c.Blob(v.Status, ct, body)
		}
	}, nil
}

// native is the framework's request behind the view a policy is given.
func native(r keyfunc.Request) *echo.Context { return r.(request).c }
