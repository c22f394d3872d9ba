package grpclimit_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/keyfunc"
)

func Example() {
	lim, err := core.NewMemory() // core.New(rdb) to share the limit across replicas
	if err != nil {
		panic(err)
	}
	// Two calls a minute for each tenant, named in the call's metadata,
	// unary and streaming alike.
	perTenant := grpclimit.New(lim, core.PerMinute(2), keyfunc.Tenant("x-tenant-id"))
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(perTenant.Unary()),
		grpc.ChainStreamInterceptor(perTenant.Stream()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer()) // any service

	lis := bufconn.Listen(1 << 20) // in memory; net.Listen("tcp", addr) for real
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", "acme")
	for range 3 {
		var header metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		st := status.Convert(err)
		fmt.Println(st.Code(), header.Get("x-ratelimit-remaining"), header.Get("retry-after"))
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay := ri.GetRetryDelay().AsDuration()
				fmt.Println("retry in", time.Duration(math.Ceil(delay.Seconds()))*time.Second)
			}
		}
	}
	// Output:
	// OK [1] []
	// OK [0] []
	// ResourceExhausted [0] [30]
	// retry in 30s
}
