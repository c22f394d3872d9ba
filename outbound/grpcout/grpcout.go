// Package grpcout is package outbound's budget for gRPC clients: client
// interceptors that take each call from an [outbound.Budget] before it is
// sent, and pause every replica's calls to the upstream when it answers
// RESOURCE_EXHAUSTED or UNAVAILABLE with a RetryInfo detail
// (google.rpc.RetryInfo, as sluice's grpclimit and Google's APIs send).
//
// It is a module of its own, so that users of package outbound's HTTP
// transport do not get gRPC in their module graph.
//
//	budget, err := outbound.New(lim, core.PerSecond(50), outbound.WithName("billing"))
//	conn, err := grpc.NewClient(target,
//		grpc.WithUnaryInterceptor(grpcout.Unary(budget, grpcout.Target())),
//		grpc.WithStreamInterceptor(grpcout.Stream(budget, grpcout.Target())))
//
// A call the budget refuses is not sent: it fails with a status of code
// RESOURCE_EXHAUSTED whose error also wraps [outbound.ErrLimited]
// (errors.Is and errors.As see the [outbound.LimitedError]).
package grpcout

import (
	"context"
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/outbound"
)

// KeyFunc returns the upstream key of a call to method on cc: the calls
// of one key share one budget. It must be safe for concurrent use.
type KeyFunc func(ctx context.Context, method string, cc *grpc.ClientConn) (string, error)

// Target keys a call by the target its connection was made for:
// "target:dns:///billing.internal:443".
func Target() KeyFunc {
	return func(_ context.Context, _ string, cc *grpc.ClientConn) (string, error) {
		return "target:" + cc.Target(), nil
	}
}

// Unary returns a client interceptor taking each unary call from b under
// key's key, and learning from its error (see the package doc).
func Unary(b *outbound.Budget, key KeyFunc) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		k, err := take(ctx, b, key, method, cc)
		if err != nil {
			return err
		}
		err = invoker(ctx, method, req, reply, cc, opts...)
		learn(ctx, b, k, err)
		return err
	}
}

// Stream returns a client interceptor taking each stream from b under
// key's key when it is opened, and learning from the error that opening
// it returns. (Errors later in the stream are the caller's to pass to
// [Learn].)
func Stream(b *outbound.Budget, key KeyFunc) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		k, err := take(ctx, b, key, method, cc)
		if err != nil {
			return nil, err
		}
		s, err := streamer(ctx, desc, cc, method, opts...)
		learn(ctx, b, k, err)
		return s, err
	}
}

// Learn applies what err, a call's error, says of key's upstream: a
// RESOURCE_EXHAUSTED or UNAVAILABLE status with a RetryInfo detail pauses
// every replica's calls to it for the detail's delay (at most
// [outbound.WithMaxPause]). It returns the delay the upstream asked for
// (0 for none).
func Learn(ctx context.Context, b *outbound.Budget, key string, err error) time.Duration {
	return learn(ctx, b, key, err)
}

func take(ctx context.Context, b *outbound.Budget, key KeyFunc, method string, cc *grpc.ClientConn) (string, error) {
	k, err := key(ctx, method, cc)
	if err != nil {
		return "", status.Errorf(codes.InvalidArgument, "grpcout: no upstream key: %v", err)
	}
	if err := b.Take(ctx, k); err != nil {
		if le, ok := errors.AsType[*outbound.LimitedError](err); ok {
			return "", &limited{le}
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return "", status.FromContextError(ctxErr).Err()
		}
		return "", status.Errorf(codes.Unavailable, "grpcout: %v", err)
	}
	return k, nil
}

func learn(ctx context.Context, b *outbound.Budget, key string, err error) time.Duration {
	if err == nil {
		return 0
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable {
		return 0
	}
	for _, d := range st.Details() {
		ri, ok := d.(*errdetails.RetryInfo)
		if !ok || ri.GetRetryDelay() == nil || ri.GetRetryDelay().CheckValid() != nil {
			continue
		}
		if delay := ri.GetRetryDelay().AsDuration(); delay > 0 {
			_ = b.Pause(ctx, key, delay) // (its error: the pause holds here alone)
			return delay
		}
	}
	return 0
}

// limited is a refusal of the budget as a gRPC status error that still
// wraps the outbound.LimitedError.
type limited struct{ *outbound.LimitedError }

// GRPCStatus is RESOURCE_EXHAUSTED, with a RetryInfo detail saying when
// the budget could take the call.
func (e *limited) GRPCStatus() *status.Status {
	st := status.New(codes.ResourceExhausted, e.Error())
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)}); err == nil {
		st = d
	}
	return st
}

// Unwrap returns the outbound.LimitedError.
func (e *limited) Unwrap() error { return e.LimitedError }
