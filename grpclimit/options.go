package grpclimit

import (
	"context"

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
// Of the options every adapter shares, gRPC has all but WithProblemJSON,
// WithChargeIf and WithFinalCost: a gRPC answer has no body to shape and no
// response status to charge by. Rate-limit fields are sent as response
// header metadata, and WithRetryJitter's delay reaches the RetryInfo detail
// too (see the package documentation).
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
