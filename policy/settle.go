package policy

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/replay"
	"github.com/sluicehq/sluice/keyfunc"
)

// WithChargeIf charges a request only when its response's status matches:
// the middleware reserves the request's cost before the handlers run, as
// an ordinary decision would take it, and once the status is known it
// keeps the charge when pred reports true and refunds it all otherwise.
// Counting failed logins only:
//
//	WithChargeIf(func(status int) bool { return status == 401 || status == 403 })
//
// or never charging a tenant for the server's own failures:
//
//	WithChargeIf(func(status int) bool { return status < 500 })
//
// The refund is atomic in Redis and applied once (see
// [core.Reservation.Settle]); a request whose process dies before its
// response is known stays charged. What the status is when the handlers
// write none, return an error or panic is said at [Response]. With
// WithChargeIf alone the middleware settles as the status is written,
// before the header fields are sent, so they describe the bucket after
// the refund (see [Verdict.Settle]). pred must be safe for concurrent
// use. A nil pred charges every response. The constructor fails (an
// adapter panics) with [WithWait].
//
// Default: every request is charged before its handler, whatever its
// response.
func WithChargeIf[C, H any](pred func(status int) bool) Option[C, H] {
	return func(c *Config[C, H]) { c.chargeIf = pred }
}

// WithFinalCost computes each request's final cost once its handlers have
// returned, from the response: its status, a header field, or a cost the
// handler recorded with [SetCost] (the tokens an LLM endpoint generated,
// the bytes an export sent). The middleware reserves the request's
// estimated cost before the handlers run ([WithCost]'s, or 1), admits or
// denies on it, and then charges f's result instead: a refund when it is
// lower, the difference when it is higher. The final cost may exceed the
// estimate by at most the smallest Burst of the limits, taking the bucket
// into debt that later requests wait out (see [core.Reservation.Settle]).
// A final cost out of range (negative, or beyond that bound) keeps the
// estimate charged and is logged once, with the cost.
//
// f runs after the handlers, with the framework's request and the
// [Response]; it must be fast and safe for concurrent use. Its result
// is charged only when [WithChargeIf] (if set) lets the status be
// charged. A nil f charges the cost the handler recorded with SetCost, or
// the estimate when it recorded none. The constructor fails (an adapter
// panics) with [WithWait].
//
// The header fields on an admitted response describe the bucket after
// the reservation; when the handlers have sent nothing yet when they
// return (fiber always, as it sends the response after its handlers), they
// are rewritten to describe it after the settlement.
//
// Default: none; the estimate is the cost.
func WithFinalCost[C, H any](f func(c C, resp Response) int) Option[C, H] {
	return func(c *Config[C, H]) { c.finalCost, c.finalSet = f, true }
}

// Response is what a middleware that charges by the response knows of it
// (see [WithChargeIf] and [WithFinalCost]).
type Response struct {
	// Status is the response's status code: the one the handlers wrote
	// (200 when they wrote a body without one, or nothing at all). A
	// handler error that the framework turns into the response (echo,
	// fiber) counts with the status it carries, or 500. A panic counts as
	// 500, except after a status was written under [WithChargeIf] alone,
	// which settles as the status is written. A request the concurrency
	// cap refuses ([WithConcurrency]) is settled at once as a 429, and one
	// that fails after its reservation as its failure's status.
	Status int
	// Header reads the response's header fields as the handlers left them;
	// never nil.
	Header interface{ Get(name string) string }
	// Reserved is the cost reserved before the handlers ran.
	Reserved int

	s *settlement
}

// Cost returns the cost the handler recorded with [SetCost], and whether
// it recorded one.
func (r Response) Cost() (int, bool) {
	if r.s == nil {
		return 0, false
	}
	n := r.s.cost.Load()
	return int(n), n >= 0
}

// SetCost records the final cost of the request whose context is ctx, for
// a middleware with [WithFinalCost]: the handler calls it once the cost is
// known, before it returns, with its request's context (net/http's
// r.Context(), gin's c.Request.Context(), echo's c.Request().Context(),
// fiber v2's c.UserContext(), fiber v3's c.Context()). The last call
// wins. It reports false, and records nothing, when no such middleware
// handles the request, n is negative, or the request was settled already
// (a call from a goroutine that outlived the handler, or from a fiber
// body stream writer, which runs after the handlers).
func SetCost(ctx context.Context, n int) bool {
	s, _ := ctx.Value(costKey{}).(*settlement)
	if s == nil || n < 0 || s.done.Load() {
		return false
	}
	s.cost.Store(int64(n))
	return true
}

// costKey is the context key under which a request's settlement waits for
// SetCost.
type costKey struct{}

// settler is a policy's charging by the response.
type settler struct {
	chargeIf  func(int) bool
	finalCost func(keyfunc.Request, Response) int // nil: SetCost's, or the estimate
	box       bool                                // WithFinalCost: give handlers a context for SetCost
	said      atomic.Bool
	lim       *core.Limiter
}

// settlement is one request's reservation, waiting for its response.
type settlement struct {
	rsv  *core.Reservation
	n    int // the cost reserved
	set  *settler
	ctx  context.Context // the request's, whose values the settlement keeps
	cost atomic.Int64    // SetCost's value; -1: none
	done atomic.Bool
	rec  Recorder     // WithRecord's, when it samples the key: records ev with the response's status
	ev   replay.Event // what rec records
}

// errSettleWait is New's error for WithWait beside charging by the
// response.
var errSettleWait = errors.New("WithWait cannot be combined with WithChargeIf or WithFinalCost: a waiting request holds no reservation to settle")

// reserve decides a request of estimated cost n with a reservation to
// settle by the response.
func (p *Policy) reserve(ctx context.Context, rl *rule, key string, n int) (core.Result, *settlement, error) {
	rsv, err := rl.engine.Reserve(ctx, key, n)
	if err != nil {
		return core.Result{}, nil, err
	}
	if !rsv.Result.Allowed {
		return rsv.Result, nil, nil // nothing was charged
	}
	s := &settlement{rsv: rsv, n: n, set: p.settle, ctx: ctx}
	s.cost.Store(-1)
	return rsv.Result, s, nil
}

// Settles reports whether the verdict holds a reservation that the
// response settles ([WithChargeIf], [WithFinalCost]): the adapter then
// calls [Verdict.Settle] when the response is known, and passes the
// handlers [Verdict.Context].
func (v *Verdict) Settles() bool { return v.settle != nil }

// AtStatus reports whether the verdict's settlement needs only the
// response's status ([WithChargeIf] without [WithFinalCost]): an adapter
// that sees the status written before the header fields go out settles
// then, so that the fields describe the bucket after the settlement.
func (v *Verdict) AtStatus() bool { return v.settle != nil && !v.settle.set.box }

// Context returns the context the handlers of a settling verdict get, so
// that [SetCost] finds the request: ctx with the settlement's box when
// the policy has [WithFinalCost], else ctx itself (no allocation). It
// returns ctx itself exactly when [Verdict.Settles] is false or
// [Verdict.AtStatus] is true, so an adapter need not compare contexts.
func (v *Verdict) Context(ctx context.Context) context.Context {
	if v.settle == nil || !v.settle.set.box {
		return ctx
	}
	return context.WithValue(ctx, costKey{}, v.settle)
}

// Settle charges the verdict's reservation by the response, once: the
// final cost is [WithFinalCost]'s (or the cost recorded with [SetCost],
// or the estimate), or 0 when [WithChargeIf] does not charge the status.
// It reports whether it settled now and moved the bucket, in which case
// the verdict's Result describes the bucket after the settlement (the
// deciding limit's Remaining and ResetAfter, moved by the difference)
// and an adapter whose response has not been sent rewrites the header
// fields from it. It does nothing on a verdict that does not settle, or
// settled already.
//
// The settlement outlives the request's context, as [Verdict.Done] does:
// it keeps the context's values, not its cancellation or deadline, and is
// bounded by the limiter's time budget ([core.WithTimeout]). A settlement
// by the status alone runs before the header is sent, so a slow store
// delays the response by up to that budget. A settlement that fails (the
// store is down: the estimate stays charged) or a final cost out of range
// is logged once per middleware.
func (v *Verdict) Settle(r keyfunc.Request, resp Response) bool {
	delta, ok := v.settle.apply(r, resp)
	if ok {
		v.Result = moved(v.Result, delta)
	}
	return ok
}

// apply settles s by resp, once, and returns by how much it moved the
// bucket, and whether it did; a nil s does nothing.
func (s *settlement) apply(r keyfunc.Request, resp Response) (int64, bool) {
	if s == nil || !s.done.CompareAndSwap(false, true) {
		return 0, false
	}
	set := s.set
	resp.Reserved, resp.s = s.n, s
	if resp.Header == nil {
		resp.Header = noHeader{}
	}
	final := resp.Reserved
	if c, ok := resp.Cost(); ok {
		final = c
	}
	if set.finalCost != nil {
		final = set.finalCost(r, resp)
	}
	if set.chargeIf != nil && !set.chargeIf(resp.Status) {
		final = 0
	}
	if s.rec != nil {
		ev := s.ev
		ev.Status = resp.Status
		s.rec.Record(ev)
	}
	if final == resp.Reserved {
		return 0, false
	}
	if err := s.rsv.Settle(context.WithoutCancel(s.ctx), final); err != nil {
		set.failed(err, final)
		return 0, false
	}
	return int64(final - resp.Reserved), true
}

// moved is res after delta more events (a refund when negative) were
// charged on its deciding limit: what that limit's fields say after a
// settlement, short of asking the store again.
func moved(res core.Result, delta int64) core.Result {
	l := res.Limit
	if l.Rate <= 0 || l.Period <= 0 {
		return res
	}
	per := l.Period / time.Duration(l.Rate) // one event's refill time
	rem := int64(res.Remaining) - delta
	rem = max(0, min(rem, int64(l.Burst)))
	res.Remaining = int(rem)
	res.ResetAfter = max(0, res.ResetAfter+time.Duration(delta)*per)
	return res
}

// failed logs the first settlement of the policy that failed.
func (s *settler) failed(err error, final int) {
	if s.said.Swap(true) {
		return
	}
	msg := "sluice: a request could not be charged by its response; its estimated cost stays charged (logged once per middleware)"
	if errors.Is(err, core.ErrInvalidLimit) {
		msg = "sluice: WithFinalCost returned a cost out of range; the estimated cost stays charged (logged once per middleware)"
	}
	s.lim.Logger().Warn(msg, "final_cost", final, "error", err.Error())
}

// noHeader is the Header of a response whose adapter passed none.
type noHeader struct{}

func (noHeader) Get(string) string { return "" }
