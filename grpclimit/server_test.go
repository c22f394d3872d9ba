package grpclimit

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// The health service's methods stand in for an application's: Check is
// unary, Watch streams from the server.
const (
	methodCheck = "/grpc.health.v1.Health/Check"
	methodWatch = "/grpc.health.v1.Health/Watch"
)

// wait bounds every poll in these tests.
const wait = 10 * time.Second

// redisLimiter returns a limiter on a private redis-server, reached through
// a fault proxy, and the proxy. The limiter is Ready (scripts loaded,
// connections open) and has a budget of a second unless opts say
// otherwise: these tests count what Redis decided, and beside two CPU hogs
// per core a cold first call outlived the default 50 ms, so the fallback
// decided it (x-ratelimit-remaining 1 where Redis says 0). The proxy's
// faults (connections refused) fail at once, whatever the budget.
func redisLimiter(t *testing.T, opts ...core.Option) (*core.Limiter, *redistest.Proxy) {
	t.Helper()
	proxy := redistest.NewProxy(t, redistest.Start(t).Addr())
	rdb := redistest.NewClient(t, proxy.Addr())
	opts = append([]core.Option{core.WithLogger(slog.New(slog.DiscardHandler)), core.WithTimeout(time.Second)}, opts...)
	lim, err := core.New(rdb, opts...)
	if err != nil {
		t.Fatalf("core.New() = %v", err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := lim.Ready(ctx); err != nil {
		t.Fatalf("Ready() = %v", err)
	}
	return lim, proxy
}

// testServer is a gRPC server with the health service, served over
// in-memory listeners whose connections report a chosen peer address.
type testServer struct {
	t       *testing.T
	srv     *grpc.Server
	handled atomic.Int32 // calls that reached the service
	serving sync.WaitGroup
}

// serve starts a server whose calls pass through rl's interceptors.
func serve(t *testing.T, rl *Interceptor) *testServer {
	t.Helper()
	return serveWith(t, []grpc.UnaryServerInterceptor{rl.Unary()}, []grpc.StreamServerInterceptor{rl.Stream()})
}

// serveWith starts a server whose calls pass through unary or stream, then
// reach the health service (SERVING), which counts them.
func serveWith(t *testing.T, unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor) *testServer {
	t.Helper()
	s := &testServer{t: t}
	unary = append(unary, func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		s.handled.Add(1)
		return h(ctx, req)
	})
	stream = append(stream, func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		s.handled.Add(1)
		return h(srv, ss)
	})
	s.srv = grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s.srv, hs)
	t.Cleanup(func() {
		hs.Shutdown()
		s.srv.Stop()
		s.serving.Wait()
	})
	return s
}

// dial returns a health client whose calls reach the server from peer
// ("203.0.113.7:5000"), or from bufconn's own address, which is no IP
// address, when peer is "".
func (s *testServer) dial(peer string) healthpb.HealthClient {
	s.t.Helper()
	bl := bufconn.Listen(1 << 20)
	var lis net.Listener = bl
	if peer != "" {
		lis = peerListener{bl, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(peer))}
	}
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		_ = s.srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		s.t.Fatalf("grpc.NewClient() = %v", err)
	}
	s.t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// peerListener is a listener whose connections report peer as their
// remote address, which gRPC gives the server as the call's peer.
type peerListener struct {
	*bufconn.Listener
	peer net.Addr
}

func (l peerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return peerConn{c, l.peer}, nil
}

type peerConn struct {
	net.Conn
	peer net.Addr
}

func (c peerConn) RemoteAddr() net.Addr { return c.peer }

// answer is what a client saw of one call.
type answer struct {
	code   codes.Code
	msg    string
	header metadata.MD
	err    error
}

// field returns the header metadata's value under name, "" if absent.
func (a answer) field(name string) string {
	if v := a.header.Get(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

// retryDelay is the RetryInfo detail's delay, and whether there is one.
func (a answer) retryDelay() (time.Duration, bool) {
	st, _ := status.FromError(a.err)
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// check makes a unary Check call with md as its metadata.
func check(t *testing.T, c healthpb.HealthClient, md ...string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return checkCtx(metadata.AppendToOutgoingContext(ctx, md...), c)
}

func checkCtx(ctx context.Context, c healthpb.HealthClient) answer {
	var a answer
	_, a.err = c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&a.header))
	st, _ := status.FromError(a.err)
	a.code, a.msg = st.Code(), st.Message()
	return a
}

// watch opens a Watch stream with md as its metadata and reads its first
// message; the stream is closed when the test ends.
func watch(t *testing.T, c healthpb.HealthClient, md ...string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	var a answer
	stream, err := c.Watch(metadata.AppendToOutgoingContext(ctx, md...), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = stream.Recv()
		a.header, _ = stream.Header()
	}
	a.err = err
	st, _ := status.FromError(err)
	a.code, a.msg = st.Code(), st.Message()
	return a
}

// eventually polls f until it reports true, failing the test after wait.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// errorRecorder is a unary interceptor placed before the one under test,
// which records what the calls it sees return on the server.
type errorRecorder struct {
	mu   sync.Mutex
	errs []error
}

func (r *errorRecorder) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	res, err := h(ctx, req)
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	return res, err
}

// last returns the last error recorded, and whether there is one.
func (r *errorRecorder) last() (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return nil, false
	}
	return r.errs[len(r.errs)-1], true
}

// codeOf is err's status code, or codes.Unknown with a note for an error
// that is no status.
func codeOf(err error) codes.Code {
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return codes.Unknown
}

var errTest = errors.New("test")
