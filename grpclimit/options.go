package grpclimit

import (
	"context"

	"google.golang.org/grpc/codes"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// Option configures the [Interceptor] that [New] returns: the options every
// adapter shares, defined once in package policy, and this package's deny
// and error handlers. When an option is passed twice, the last one wins. A
// nil Option makes New panic.
//
// The options that take a function pass it the call's context, from which
// grpc.Method gives the full method, metadata.FromIncomingContext the
// metadata and peer.FromContext the peer.
//
// Of the options every adapter shares, gRPC has all but WithProblemJSON
// and WithFinalCost: a gRPC answer has no body to shape, and no response
// header a final cost could be read from before it is sent. [WithChargeIf]
// is gRPC's own form of the shared option: its predicate takes the call's
// final status code where the HTTP adapters' take a status. Rate-limit
// fields are sent as response header metadata, and WithRetryJitter's delay
// reaches the RetryInfo detail too (see the package documentation).
type Option = policy.Option[context.Context, Handlers]

// Handlers holds the settings only this adapter has: the deny and error
// handlers, set with [WithDenyHandler] and [WithErrorHandler]. It is the
// second type parameter of [Option]; its fields are not for use outside
// the package.
type Handlers struct {
	deny    func(context.Context, core.Result) error
	onError func(context.Context, error) error
}

// WithDenyHandler sets the handler that answers denied calls: the call
// fails with the error f returns, which should be a status error
// (status.Error), since gRPC sends any other error's text to the client as
// codes.Unknown; if f returns nil, the call goes on. The rate-limit
// metadata and retry-after are already set when f runs; res says when to
// retry. f must be safe for concurrent use. A nil f restores the default.
//
// Default: codes.ResourceExhausted with a google.rpc.RetryInfo detail.
func WithDenyHandler(f func(ctx context.Context, res core.Result) error) Option {
	return func(c *policy.Config[context.Context, Handlers]) { c.Adapter.deny = f }
}

// WithErrorHandler sets the handler that answers calls that could not be
// decided: err wraps [keyfunc.ErrNoKey], [policy.ErrDenyList] (a deny list
// refused it), [core.ErrUnavailable],
// [core.ErrInvalidLimit] or the call's context error. Do not send err's
// text to the client. The call fails with the status error f returns; if f
// returns nil, the call goes on, unlimited (to fail open on one service,
// say). f must be safe for concurrent use. A nil f restores the default.
//
// Default: codes.InvalidArgument for a missing key, codes.PermissionDenied
// for a deny-listed call, codes.Unavailable when
// the store is unavailable, codes.DeadlineExceeded or codes.Canceled when
// the call ended first, and codes.Internal otherwise, each with a fixed
// message.
func WithErrorHandler(f func(ctx context.Context, err error) error) Option {
	return func(c *policy.Config[context.Context, Handlers]) { c.Adapter.onError = f }
}

// WithChargeIf charges a call only when the status code it ends with
// matches: the interceptor reserves the call's cost before the handler
// runs, as an ordinary decision would take it, and once the handler has
// returned it keeps the charge when pred reports true for the code and
// refunds it all otherwise. Counting failed calls only, so that a client
// is limited in its errors and not in its work:
//
//	WithChargeIf(func(code codes.Code) bool { return code != codes.OK })
//
// or counting failed logins only:
//
//	WithChargeIf(func(code codes.Code) bool { return code == codes.Unauthenticated })
//
// The code is the handler's error's, as gRPC would send it: codes.OK for a
// nil error, the status error's code, codes.Canceled or
// codes.DeadlineExceeded for a context error, codes.Unknown for any other
// error. A stream ends with the code of its handler's error, whatever
// number of messages it carried. A handler that panics counts as
// codes.Internal; a call the concurrency cap refuses ([WithConcurrency])
// counts as the codes.ResourceExhausted it gets. A client that cancels
// does not stop the settlement: the call counts with the code its handler
// returns.
//
// It is [policy.WithChargeIf] for gRPC, and settles through the policy
// exactly as the HTTP adapters do (see [policy.Verdict.Settle]): the
// refund is atomic in Redis and applied once, and a call whose process
// dies before its handler returns stays charged. The rate-limit metadata
// is sent before the handler runs, so it describes the bucket after the
// reservation; the next call's shows the refund. [Interceptor.Limit]
// cannot see a call end, so the calls it admits stay charged. pred must
// be safe for concurrent use. A nil pred charges every call. New panics
// with [WithWait].
//
// Default: every call is charged before its handler, whatever its code.
func WithChargeIf(pred func(code codes.Code) bool) Option {
	return policy.WithChargeIf[context.Context, Handlers](byCode(pred))
}

// byCode is pred as the policy's predicate on a response's status. The
// interceptor settles a call with its code (0 to 16) as the status; the
// policy settles a call that does not run with the HTTP status of its
// answer (429 when the concurrency cap refuses it, that of its failure
// when the cap cannot be asked), which byCode reads as the code the
// interceptor answers such a call with, as failed does. The two ranges
// do not meet: gRPC's codes run from 0 to 16.
func byCode(pred func(codes.Code) bool) func(status int) bool {
	if pred == nil {
		return nil
	}
	return func(status int) bool { return pred(codeOfStatus(status)) }
}

// codeOfStatus is the gRPC code a settlement's status stands for (see
// byCode).
func codeOfStatus(status int) codes.Code {
	switch {
	case status >= 0 && status < 100:
		return codes.Code(status)
	case status == 429:
		return codes.ResourceExhausted
	case status == 400:
		return codes.InvalidArgument
	case status == 403:
		return codes.PermissionDenied
	case status == 503:
		return codes.Unavailable
	}
	return codes.Internal
}

// Key returns a key function over the call's context, for keys keyfunc's
// extractors cannot express, such as the name in a client certificate:
//
//	Key(func(ctx context.Context) (string, error) {
//		if p, ok := peer.FromContext(ctx); ok {
//			if tls, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(tls.State.PeerCertificates) > 0 {
//				return "cert:" + tls.State.PeerCertificates[0].Subject.CommonName, nil
//			}
//		}
//		return "", keyfunc.ErrNoKey
//	})
//
// It is [policy.NativeKey] for gRPC: give the key a prefix of your own,
// and return an error wrapping [keyfunc.ErrNoKey] (codes.InvalidArgument)
// when the call has none. Used in another framework's middleware it fails
// every request (500, logged once).
func Key(f func(ctx context.Context) (string, error)) keyfunc.Func { return policy.NativeKey(f) }
