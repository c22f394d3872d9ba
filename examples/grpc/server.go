package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoredis"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/keyfunc"
)

// serve runs the limited service on addr until ctx ends.
func serve(ctx context.Context, addr string, stdout io.Writer) error {
	redisSrv, err := demoredis.Start(stdout)
	if err != nil {
		return err
	}
	defer redisSrv.Close()
	// Your go-redis client, and one engine for every interceptor (and for
	// any HTTP middleware in the same process). core.New takes any client;
	// these two options let the limiter's budget reach the socket (and
	// batch concurrent decisions) and keep a lost reply from charging its
	// bucket twice. The budget here is a second, not the default 50 ms: an
	// embedded Redis shares this process's CPU, and on a busy machine a
	// decision left to the local fallback would change the story below.
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	lim, err := core.New(rdb, core.WithTimeout(time.Second))
	if err != nil {
		return err
	}
	defer lim.Close()

	// Every call: 100 a minute per client address, then 600 a minute per
	// tenant, named in the call's metadata, across the server's methods
	// (an interceptor is one budget across the methods it guards).
	// Clients write x-tenant-id themselves: trust it only behind a gateway
	// that sets it, or key by keyfunc.TenantValue after an authentication
	// interceptor. A call without it is refused with InvalidArgument,
	// never let through.
	perIP := grpclimit.New(lim, core.PerMinute(100), keyfunc.IP())
	perTenant := grpclimit.New(lim, core.PerMinute(600), keyfunc.Tenant("x-tenant-id"))
	// Streams are expensive: 2 a minute per client for each streaming
	// method: WithPerRoute(true) gives each method ("/demo.Greeter/Count")
	// buckets of its own.
	perStream := grpclimit.New(lim, core.PerMinute(2), keyfunc.IP(), grpclimit.WithPerRoute(true))

	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(perIP.Unary(), perTenant.Unary()),
		grpc.ChainStreamInterceptor(perIP.Stream(), perTenant.Stream(), perStream.Stream()),
	)
	srv.RegisterService(&greeterDesc, greeter{})

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	target := fmt.Sprintf("localhost:%d", ln.Addr().(*net.TCPAddr).Port)
	fmt.Fprintf(stdout, "listening on %s (gRPC, plaintext); try:\n  go run ./examples/grpc -call %s\n", target, target)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop() // lets running calls finish
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop() // streams that would not end
		<-stopped
	}
	return <-errc
}

// greeter is the service behind the limits.
type greeter struct{}

func (greeter) Hello(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String("hello, " + in.GetValue()), nil
}

func (greeter) Count(in *wrapperspb.Int32Value, stream grpc.ServerStream) error {
	for i := range min(in.GetValue(), 100) {
		if err := stream.SendMsg(wrapperspb.Int32(i + 1)); err != nil {
			return err
		}
	}
	return nil
}
