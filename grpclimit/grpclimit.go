package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// Interceptor limits gRPC calls by key under a limit: one middleware, whose
// [Interceptor.Unary] and [Interceptor.Stream] interceptors share its
// buckets, and whose [Interceptor.Limit] serves go-grpc-middleware's
// ratelimit interceptors. Create one with [New] or [Build]; the zero value
// panics when used. An Interceptor is safe for concurrent use.
type Interceptor struct {
	p *policy.Policy
	o Handlers
}

// New returns an Interceptor that limits calls by key under limit, on lim.
// One Limiter serves any number of interceptors; each names its own limit
// and key function.
//
// Each call is run through a [policy.Policy] with the call's context:
// admitted calls get the rate-limit metadata and go on to the handler;
// denied ones get the metadata, retry-after and the deny handler (see
// [WithDenyHandler]); calls that cannot be decided get the error handler
// (see [WithErrorHandler]). See the package documentation for the default
// answers.
//
// New panics, with a message that begins "grpclimit: ", when lim or key is
// nil, when limit, a limit from [WithLimits] or the cap of
// [WithConcurrency] is invalid (the panic value then wraps
// [core.ErrInvalidLimit]), when [WithWait] is negative or is combined with
// [WithChargeIf], when [WithHeaders] names an unknown style, or when an
// option is nil.
func New(lim *core.Limiter, limit core.Limit, key keyfunc.Func, opts ...Option) *Interceptor {
	l, err := Build(lim, limit, key, opts...)
	if err != nil {
		panic(err)
	}
	return l
}

// Build is [New] returning its error instead of panicking, for limits and
// options read from configuration, where a bad value is an input error
// rather than a programming mistake. The error begins "grpclimit: " and, for
// an invalid limit, wraps [core.ErrInvalidLimit].
func Build(lim *core.Limiter, limit core.Limit, key keyfunc.Func, opts ...Option) (*Interceptor, error) {
	p, o, err := policy.New(lim, limit, key, native, opts...)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	return &Interceptor{p: p, o: o}, nil
}

// Unary returns the interceptor for unary calls, for grpc.UnaryInterceptor
// or grpc.ChainUnaryInterceptor. It sets the rate-limit metadata with
// grpc.SetHeader, and calls the handler only for an admitted call. With
// [WithConcurrency], an admitted call holds a slot of its key until the
// handler returns or panics. With [WithChargeIf], an admitted call's
// charge is kept or refunded by the code of the handler's error once the
// handler returns, or as codes.Internal when it panics.
func (l *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		c := &call{ctx: ctx, method: info.FullMethod}
		v, err := l.decide(c, grpc.ServerTransportStreamFromContext(ctx))
		if err != nil {
			return nil, err
		}
		if v.Settles() {
			var resp any
			err := settled(v, c, func() (err error) {
				resp, err = handler(ctx, req)
				return err
			})
			return resp, err
		}
		defer v.Done() // also when the handler panics
		return handler(ctx, req)
	}
}

// Stream returns the interceptor for streaming calls, for
// grpc.StreamInterceptor or grpc.ChainStreamInterceptor. A stream is one
// call: it is decided once, when it opens, whatever number of messages it
// carries. The interceptor sets the rate-limit metadata with
// ServerStream.SetHeader, and calls the handler only for an admitted
// stream. With [WithConcurrency], an admitted stream holds a slot of its
// key until the handler returns or panics: for as long as it is open.
// With [WithChargeIf], an admitted stream's charge is kept or refunded by
// the code of the stream handler's error once it returns, or as
// codes.Internal when it panics.
func (l *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		c := &call{ctx: ss.Context(), method: info.FullMethod}
		v, err := l.decide(c, ss)
		if err != nil {
			return err
		}
		if v.Settles() {
			return settled(v, c, func() error { return handler(srv, ss) })
		}
		defer v.Done() // also when the handler panics
		return handler(srv, ss)
	}
}

// settled runs the handler of a call whose verdict settles by the call's
// end ([WithChargeIf]) through run, and settles the reservation once, with
// the code the call ends with (codes.Internal when the handler panics,
// whose panic goes on), before the verdict's Done. verdict is taken by
// value, so that only a settling call's verdict moves to the heap.
func settled(verdict policy.Verdict, c *call, run func() error) error {
	v := &verdict
	code := codes.Internal // unless run returns
	defer func() {
		v.Settle(c, policy.Response{Status: int(code)})
		v.Done()
	}()
	err := run()
	code = endCode(err)
	return err
}

// endCode is the status code a call whose handler returned err ends with,
// as gRPC sends it: the status error's code (codes.OK for nil), a context
// error's, or codes.Unknown.
func endCode(err error) codes.Code {
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return status.FromContextError(err).Code()
}

// Limit decides the call whose server context is ctx and returns nil to
// let it go on, or the status error it fails with, as [Interceptor.Unary]
// would. It sets the rate-limit metadata with grpc.SetHeader, and finds
// the full method with grpc.Method.
//
// Limit makes an Interceptor a Limiter of go-grpc-middleware's ratelimit
// package (github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit),
// for servers already built on it:
//
//	grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(rl))
//
// Those interceptors answer every error with a new
// codes.ResourceExhausted status whose message embeds this one's, so a
// call without a key or a store outage look like a denial there, and the
// RetryInfo detail is lost; prefer Unary and Stream.
//
// Limit cannot hold a slot of a [WithConcurrency] cap, since nothing tells
// it when the call ends: it refuses a call whose key has Max calls in
// flight through Unary and Stream, but the calls it admits take no slot.
// For the same reason it cannot refund a call by its code: under
// [WithChargeIf] the calls it admits stay charged.
func (l *Interceptor) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	v, err := l.decide(&call{ctx: ctx, method: method}, grpc.ServerTransportStreamFromContext(ctx))
	v.Done()
	return err
}

// headerSetter is what both grpc.ServerTransportStream and
// grpc.ServerStream offer to set response header metadata.
type headerSetter interface {
	SetHeader(metadata.MD) error
}

// decide runs the policy for call c and returns its verdict and nil to
// let the call go on, or the error it fails with. The caller calls the
// verdict's Done when the call ends (a handler that lets a refused call go
// on holds no slot), after its Settle when it settles. hs may be nil
// outside a server call.
func (l *Interceptor) decide(c *call, hs headerSetter) (policy.Verdict, error) {
	ctx := c.ctx
	v := l.p.Decide(ctx, c)
	switch v.Action {
	case policy.Continue:
		setHeaders(&v, hs)
		return v, nil
	case policy.Deny:
		retryAfter := setHeaders(&v, hs)
		if l.o.deny != nil {
			return v, l.o.deny(ctx, v.Result)
		}
		return v, denied(v.Result, retryAfter)
	default:
		if l.o.onError != nil {
			return v, l.o.onError(ctx, v.Err)
		}
		return v, failed(ctx, &v)
	}
}

// setHeaders sends the verdict's fields as response header metadata under
// lower-case names, and returns its Retry-After value ("" if none). An
// error (the headers were sent already, or hs is nil) leaves the call
// without them: they are advice, and failing the call for them would be
// worse.
func setHeaders(v *policy.Verdict, hs headerSetter) (retryAfter string) {
	var md metadata.MD
	var backing []string // one allocation for every field's value slice
	v.Headers(func(name, value string) {
		if name == "Retry-After" {
			retryAfter = value
		}
		if hs == nil {
			return
		}
		if md == nil {
			md, backing = make(metadata.MD, 4), make([]string, 0, 6)
		}
		backing = append(backing, value)
		md[lowerName(name)] = backing[len(backing)-1 : len(backing) : len(backing)]
	})
	if md != nil {
		_ = hs.SetHeader(md)
	}
	return retryAfter
}

// lowerName is name in lower case, as gRPC metadata keys are, without
// allocating for the fields a verdict carries.
func lowerName(name string) string {
	switch name {
	case "Retry-After":
		return "retry-after"
	case "X-RateLimit-Limit":
		return "x-ratelimit-limit"
	case "X-RateLimit-Remaining":
		return "x-ratelimit-remaining"
	case "X-RateLimit-Reset":
		return "x-ratelimit-reset"
	case "RateLimit-Policy":
		return "ratelimit-policy"
	case "RateLimit":
		return "ratelimit"
	}
	return strings.ToLower(name)
}

// The messages of the default answers. They are the whole text a client
// sees: never an error's.
const (
	msgDenied      = "rate limit exceeded"
	msgNoKey       = "the call carries no rate-limit key"
	msgUnavailable = "the rate limiter's store is unavailable"
	msgEnded       = "the call ended before the rate limiter decided"
	msgInternal    = "the rate limiter is misconfigured"
	msgDenyList    = "the call's key or address is on a deny list"
)

// denied is the default answer to a denied call: ResourceExhausted, with
// a RetryInfo detail saying when the same call could be admitted.
func denied(res core.Result, retryAfter string) error {
	st := status.New(codes.ResourceExhausted, msgDenied)
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryDelay(res.RetryAfter, retryAfter))}); err == nil {
		st = d
	}
	return st.Err()
}

// retryDelay is RetryInfo's delay: the exact wait, unless WithRetryJitter
// made the Retry-After field (whole seconds, rounded up) say more than the
// wait rounded up, which it does exactly when the field is a second or more
// above the wait; then the field's value, so that clients reading either
// spread out alike.
func retryDelay(wait time.Duration, retryAfter string) time.Duration {
	n, err := strconv.ParseInt(retryAfter, 10, 64)
	if err != nil || n > int64(math.MaxInt64/time.Second) {
		return wait
	}
	if field := time.Duration(n) * time.Second; field-wait >= time.Second {
		return field
	}
	return wait
}

// failed is the default answer to a call the policy could not decide,
// chosen as the policy chose its HTTP status.
func failed(ctx context.Context, v *policy.Verdict) error {
	switch {
	case v.Status == 400:
		return status.Error(codes.InvalidArgument, msgNoKey)
	case errors.Is(v.Err, policy.ErrDenyList):
		return status.Error(codes.PermissionDenied, msgDenyList)
	case errors.Is(v.Err, core.ErrUnavailable):
		return status.Error(codes.Unavailable, msgUnavailable)
	case ctx.Err() != nil:
		// The client's deadline or cancellation, not the store's failure:
		// say so as gRPC does, for the server's own logs and metrics
		// (the client has its own answer already).
		return status.Error(status.FromContextError(ctx.Err()).Code(), msgEnded)
	case v.Status == 503:
		return status.Error(codes.Unavailable, msgUnavailable)
	}
	return status.Error(codes.Internal, msgInternal)
}

// native is the framework's request behind the view a policy is given.
func native(r keyfunc.Request) context.Context { return r.(*call).ctx }
