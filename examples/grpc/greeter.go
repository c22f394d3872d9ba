package main

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The demo service, written out by hand as protoc-gen-go-grpc would
// generate it from
//
//	service Greeter {
//	  rpc Hello(google.protobuf.StringValue) returns (google.protobuf.StringValue);
//	  rpc Count(google.protobuf.Int32Value) returns (stream google.protobuf.Int32Value);
//	}
//
// so that the example needs no protoc. Nothing here is about limits.

// The service's full methods, which keyfunc.Route keys calls by.
const (
	helloMethod = "/demo.Greeter/Hello"
	countMethod = "/demo.Greeter/Count"
)

type greeterServer interface {
	Hello(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
	Count(*wrapperspb.Int32Value, grpc.ServerStream) error
}

var greeterDesc = grpc.ServiceDesc{
	ServiceName: "demo.Greeter",
	HandlerType: (*greeterServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Hello",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			handler := func(ctx context.Context, req any) (any, error) {
				return srv.(greeterServer).Hello(ctx, req.(*wrapperspb.StringValue))
			}
			if interceptor == nil {
				return handler(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: helloMethod}, handler)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Count",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			in := new(wrapperspb.Int32Value)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			return srv.(greeterServer).Count(in, stream)
		},
	}},
}

// greeterClient calls the service on conn.
type greeterClient struct{ conn grpc.ClientConnInterface }

func (c greeterClient) Hello(ctx context.Context, in *wrapperspb.StringValue, opts ...grpc.CallOption) (*wrapperspb.StringValue, error) {
	out := new(wrapperspb.StringValue)
	if err := c.conn.Invoke(ctx, helloMethod, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

// Count opens the stream; read it with RecvMsg into *wrapperspb.Int32Value
// until io.EOF.
func (c greeterClient) Count(ctx context.Context, in *wrapperspb.Int32Value, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	stream, err := c.conn.NewStream(ctx, &greeterDesc.Streams[0], countMethod, opts...)
	if err != nil {
		return nil, err
	}
	if err := stream.SendMsg(in); err != nil {
		return nil, err
	}
	if err := stream.CloseSend(); err != nil {
		return nil, err
	}
	return stream, nil
}
