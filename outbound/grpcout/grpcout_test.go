package grpcout_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/outbound"
	"github.com/sluicehq/sluice/outbound/grpcout"
	"github.com/sluicehq/sluice/redistest"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }

// pausingHealth is a health service whose first Check is answered
// RESOURCE_EXHAUSTED with RetryInfo of 30 s; it counts the Checks.
type pausingHealth struct {
	healthpb.UnimplementedHealthServer
	calls atomic.Int64
}

func (h *pausingHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if h.calls.Add(1) == 1 {
		st, _ := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(30 * time.Second)})
		return nil, st.Err()
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// upstream serves h in memory and returns a dialer for it; both end with
// cleanup.
func upstream(tb testing.TB, h *pausingHealth) func(context.Context, string) (net.Conn, error) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(srv.Stop)
	return func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }
}

// client returns a health client whose calls take from b.
func client(tb testing.TB, b *outbound.Budget, dial func(context.Context, string) (net.Conn, error)) healthpb.HealthClient {
	conn, err := grpc.NewClient("passthrough:///upstream", grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcout.Unary(b, grpcout.Target())))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// TestRetryInfoPausesFleet: one replica's RESOURCE_EXHAUSTED with a
// RetryInfo of 30 s pauses the calls of three replicas (on a real Redis)
// for 30 s less the test's time; they fail unsent, RESOURCE_EXHAUSTED and
// ErrLimited both.
func TestRetryInfoPausesFleet(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := core.WithPrefix(fmt.Sprintf("grpcouttest:%d:", time.Now().UnixNano()))
	h := &pausingHealth{}
	dial := upstream(t, h)
	var clients []healthpb.HealthClient
	for range 3 {
		lim, err := core.New(redistest.NewClient(t, addr), prefix, core.WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lim.Close() })
		b, err := outbound.New(lim, core.PerSecond(100), outbound.WithName("health"), outbound.WithFailFast(true))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		clients = append(clients, client(t, b, dial))
	}
	ctx := context.Background()
	if _, err := clients[0].Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("first call: %v, want the upstream's RESOURCE_EXHAUSTED", err)
	}
	for i, c := range clients {
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		var le *outbound.LimitedError
		if status.Code(err) != codes.ResourceExhausted || !errors.As(err, &le) || !le.Paused || le.RetryAfter <= 29*time.Second || le.RetryAfter > 30*time.Second {
			t.Errorf("replica %d: call = %v; want refused unsent, paused for about 30 s", i, err)
		}
	}
	if n := h.calls.Load(); n != 1 {
		t.Errorf("the upstream saw %d calls, want 1", n)
	}
}

// The upstream answers the first call RESOURCE_EXHAUSTED with a RetryInfo
// of 30 s: the budget pauses the calls to it, and the next one fails
// unsent. (A NewMemory limiter keeps the example self-contained; a fleet
// passes core.New(rdb).)
func ExampleUnary() {
	h := &pausingHealth{}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	lim, err := core.NewMemory()
	if err != nil {
		panic(err)
	}
	budget, err := outbound.New(lim, core.PerSecond(50), outbound.WithName("health"), outbound.WithFailFast(true))
	if err != nil {
		panic(err)
	}
	defer budget.Close()
	conn, err := grpc.NewClient("passthrough:///upstream",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcout.Unary(budget, grpcout.Target())))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)

	_, err = health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println("first call:", status.Code(err))
	_, err = health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println("second call:", status.Code(err), errors.Is(err, outbound.ErrLimited))
	fmt.Println("the upstream saw", h.calls.Load(), "call")
	// Output:
	// first call: ResourceExhausted
	// second call: ResourceExhausted true
	// the upstream saw 1 call
}
