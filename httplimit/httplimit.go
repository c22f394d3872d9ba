package httplimit

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// New returns middleware that limits requests by key under limit, on lim.
// One Limiter serves any number of middlewares; each names its own limit
// and key function. The middleware is safe for concurrent use.
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
// New panics, with a message that begins "httplimit: ", when lim or key is
// nil, when limit, a limit from [WithLimits] or the cap of
// [WithConcurrency] is invalid (the panic value then wraps
// [core.ErrInvalidLimit]), when [WithWait] is negative or set beside
// [WithChargeIf] or [WithFinalCost], when [WithHeaders]
// names an unknown style, or when an option is nil.
func New(lim *core.Limiter, limit core.Limit, key keyfunc.Func, opts ...Option) func(http.Handler) http.Handler {
	mw, err := Build(lim, limit, key, opts...)
	if err != nil {
		panic(err)
	}
	return mw
}

// Build is [New] returning its error instead of panicking, for limits and
// options read from configuration, where a bad value is an input error
// rather than a programming mistake. The error begins "httplimit: " and, for
// an invalid limit, wraps [core.ErrInvalidLimit].
func Build(lim *core.Limiter, limit core.Limit, key keyfunc.Func, opts ...Option) (func(http.Handler) http.Handler, error) {
	p, o, err := policy.New(lim, limit, key, native, opts...)
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	return func(next http.Handler) http.Handler {
		mux, _ := next.(*http.ServeMux)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if mux != nil {
				// Around a ServeMux: the route the mux is about to match,
				// which it sets itself when it serves the request.
				_, r.Pattern = mux.Handler(r)
			}
			v := p.Decide(r.Context(), request{r})
			switch v.Action {
			case policy.Continue:
				v.WriteHeaders(w.Header())
				if v.Settles() {
					serveSettled(w, r, next, v)
					return
				}
				defer v.Done() // also when next panics
				next.ServeHTTP(w, r)
			case policy.Deny:
				v.WriteHeaders(w.Header())
				if o.deny != nil {
					o.deny(w, r, v.Result)
					return
				}
				write(w, &v)
			default:
				if o.onError != nil {
					o.onError(w, r, v.Err)
					return
				}
				write(w, &v)
			}
		})
	}, nil
}

// write sends the verdict's default answer, as http.Error does.
func write(w http.ResponseWriter, v *policy.Verdict) {
	ct, body := v.Body()
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(v.Status)
	_, _ = w.Write(body)
}

// native is the framework's request behind the view a policy is given.
func native(r keyfunc.Request) *http.Request { return r.(request).r }
