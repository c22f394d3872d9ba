package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/sluicehq/sluice/internal/leakcheck"
)

// newShortClient returns a client like NewClient's whose reads time out
// after readTimeout. Tests that check for leaks close it themselves; the
// cleanup only covers early failures.
func newShortClient(t *testing.T, addr string, readTimeout time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:          addr,
		DialTimeout:   time.Second,
		ReadTimeout:   readTimeout,
		WriteTimeout:  time.Second,
		DialerRetries: 1,
		MaxRetries:    -1,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestProxyFaults(t *testing.T) {
	ctx := t.Context()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	c := newShortClient(t, p.Addr(), time.Second)
	defer func() {
		// Close everything this test started, then check that nothing
		// is left running. Cleanups run too late for that.
		c.Close()
		if err := p.Close(); err != nil {
			t.Errorf("Proxy.Close() = %v, want nil", err)
		}
		s.Kill()
		if err := leakcheck.Check(); err != nil {
			t.Error(err)
		}
	}()

	t.Run("pass through", func(t *testing.T) {
		mustPing(t, ctx, c)
	})

	t.Run("delay", func(t *testing.T) {
		const delay = 200 * time.Millisecond
		p.SetDelay(delay)
		defer p.SetDelay(0)
		start := time.Now()
		mustPing(t, ctx, c)
		if got := time.Since(start); got < delay {
			t.Fatalf("Ping() with SetDelay(%v) took %v, want at least %v", delay, got, delay)
		}
	})

	t.Run("delay once per reply", func(t *testing.T) {
		// A 1 MiB reply crosses in 32 chunks or more: it is late by the
		// delay once, as from a Redis that far away, not once a chunk.
		const delay = 300 * time.Millisecond
		big := make([]byte, 1<<20)
		if err := c.Set(ctx, "big", big, 0).Err(); err != nil {
			t.Fatal(err)
		}
		p.SetDelay(delay)
		defer p.SetDelay(0)
		start := time.Now()
		got, err := c.WithTimeout(10*time.Second).Get(ctx, "big").Bytes()
		took := time.Since(start)
		if err != nil || len(got) != len(big) {
			t.Fatalf("GET of 1 MiB through the delay: %d bytes, %v", len(got), err)
		}
		if took < delay || took > 10*delay {
			t.Fatalf("GET of 1 MiB with SetDelay(%v) took %v, want the delay once (%v to %v)", delay, took, delay, 10*delay)
		}
	})

	t.Run("blackhole", func(t *testing.T) {
		p.SetBlackhole(true)
		// The clone shares c's pool, so this PING goes over the open
		// connection, with a 100ms read timeout.
		if err := c.WithTimeout(100 * time.Millisecond).Ping(ctx).Err(); !isTimeout(err) {
			t.Fatalf("Ping() on an open connection with SetBlackhole(true) = %v, want a timeout", err)
		}
		// A new connection hangs in its handshake.
		fresh := newShortClient(t, p.Addr(), 100*time.Millisecond)
		defer fresh.Close()
		if err := fresh.Ping(ctx).Err(); !isTimeout(err) {
			t.Fatalf("Ping() on a new connection with SetBlackhole(true) = %v, want a timeout", err)
		}
		p.SetBlackhole(false)
		mustPing(t, ctx, c)
	})

	t.Run("refuse", func(t *testing.T) {
		p.SetRefuse(true)
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("Ping() with SetRefuse(true) = nil, want an error")
		}
		// A fresh connection is refused too, not only the pooled one.
		fresh := newShortClient(t, p.Addr(), time.Second)
		defer fresh.Close()
		if err := fresh.Ping(ctx).Err(); err == nil {
			t.Fatal("Ping() on a new connection with SetRefuse(true) = nil, want an error")
		}
		p.SetRefuse(false)
		mustPing(t, ctx, c)
		mustPing(t, ctx, fresh)
	})
}

func TestProxyTargetDown(t *testing.T) {
	ctx := t.Context()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	c := NewClient(t, p.Addr())
	mustPing(t, ctx, c)
	s.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("Ping() through the proxy with Redis killed = nil, want an error")
	}
	s.Restart()
	mustPing(t, ctx, c)
}

// TestProxySetTarget: after SetTarget the client's connection is reset,
// and its next command reaches the other server.
func TestProxySetTarget(t *testing.T) {
	ctx := t.Context()
	a, b := Start(t), Start(t)
	p := NewProxy(t, a.Addr())
	c := NewClient(t, p.Addr())
	if err := c.Set(ctx, "where", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p.SetTarget(b.Addr())
	var got string
	var err error
	for range 3 { // the first command may meet the reset connection
		if got, err = c.Get(ctx, "where").Result(); err == nil || errors.Is(err, redis.Nil) {
			break
		}
	}
	if !errors.Is(err, redis.Nil) {
		t.Fatalf("GET through the proxy after SetTarget = %q, %v; want nil from the other server", got, err)
	}
}

func TestProxyCloseInterruptsDelay(t *testing.T) {
	ctx := t.Context()
	s := Start(t)
	direct := newShortClient(t, s.Addr(), time.Second)
	p := NewProxy(t, s.Addr())
	c := newShortClient(t, p.Addr(), time.Minute)
	mustPing(t, ctx, c) // open the connection before the delay starts
	before, err := CommandCalls(ctx, direct)
	if err != nil {
		t.Fatalf("CommandCalls() = %v", err)
	}

	p.SetDelay(time.Hour)
	pingErr := make(chan error, 1)
	go func() { pingErr <- c.Ping(ctx).Err() }()
	waitForCalls(t, ctx, direct, "ping", before["ping"]+1) // the reply is now held by the proxy

	start := time.Now()
	if err := p.Close(); err != nil {
		t.Errorf("Proxy.Close() = %v, want nil", err)
	}
	if got := time.Since(start); got > 5*time.Second {
		t.Errorf("Proxy.Close() with a pending 1h delay took %v", got)
	}
	if err := <-pingErr; err == nil {
		t.Error("Ping() interrupted by Proxy.Close() = nil, want an error")
	}
	c.Close()
	direct.Close()
	s.Kill()
	if err := leakcheck.Check(); err != nil {
		t.Error(err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// waitForCalls polls until the server has seen at least want calls of cmd.
func waitForCalls(t *testing.T, ctx context.Context, c *redis.Client, cmd string, want int64) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		calls, err := CommandCalls(ctx, c)
		if err != nil {
			t.Fatalf("CommandCalls() = %v", err)
		}
		if calls[cmd] >= want {
			return
		}
		select {
		case <-deadline.C:
			t.Fatalf("%s calls = %d after 10s, want at least %d", cmd, calls[cmd], want)
		case <-tick.C:
		}
	}
}

func TestProxySetDown(t *testing.T) {
	ctx := t.Context()
	s := Start(t)
	p, err := ListenProxy(s.Addr())
	if err != nil {
		t.Fatalf("ListenProxy() = %v", err)
	}
	addr := p.Addr()
	c := newShortClient(t, addr, time.Second)
	mustPing(t, ctx, c)

	if err := p.SetDown(true); err != nil {
		t.Fatalf("SetDown(true) = %v", err)
	}
	if err := p.SetDown(true); err != nil {
		t.Fatalf("second SetDown(true) = %v, want nil", err)
	}
	// The pooled connection was reset, and nothing listens any more.
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("Ping() on an open connection with SetDown(true) = nil, want an error")
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		if conn != nil {
			conn.Close()
		}
		t.Fatalf("dial %s with SetDown(true) = %v, want connection refused", addr, err)
	}

	if err := p.SetDown(false); err != nil {
		t.Fatalf("SetDown(false) = %v", err)
	}
	if got := p.Addr(); got != addr {
		t.Errorf("Addr() after SetDown(false) = %s, want %s", got, addr)
	}
	mustPing(t, ctx, c)

	// Close works while down, and SetDown does nothing after Close.
	if err := p.SetDown(true); err != nil {
		t.Fatalf("SetDown(true) = %v", err)
	}
	c.Close()
	if err := p.Close(); err != nil {
		t.Errorf("Proxy.Close() while down = %v, want nil", err)
	}
	if err := p.SetDown(false); err != nil {
		t.Errorf("SetDown(false) after Close = %v, want nil", err)
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Error("dial after Close succeeded: SetDown(false) listened again")
	}
	s.Kill()
	if err := leakcheck.Check(); err != nil {
		t.Error(err)
	}
}

// TestProxySetTargetRacesDials: connections dialled while SetTarget runs
// either reach the new target or are reset; none stays on the old one.
// (Before, a connection whose upstream was dialled to the old target just
// before the switch and registered just after it survived the reset, and
// a test's failover left a client talking to the old master.)
func TestProxySetTargetRacesDials(t *testing.T) {
	ctx := t.Context()
	servers := []*Server{Start(t), Start(t)}
	names := []string{"a", "b"}
	for i, s := range servers {
		if err := NewClient(t, s.Addr()).Set(ctx, "where", names[i], 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	p := NewProxy(t, servers[0].Addr())
	get := []byte("*2\r\n$3\r\nGET\r\n$5\r\nwhere\r\n")
	for round := range 20 {
		next := (round + 1) % 2
		var (
			mu    sync.Mutex
			conns []net.Conn
			stop  atomic.Bool
			wg    sync.WaitGroup
		)
		for range 4 {
			wg.Go(func() {
				for n := 0; n < 25 && !stop.Load(); n++ {
					c, err := net.Dial("tcp", p.Addr())
					if err != nil {
						continue
					}
					mu.Lock()
					conns = append(conns, c)
					mu.Unlock()
				}
			})
		}
		time.Sleep(time.Millisecond)
		p.SetTarget(servers[next].Addr())
		stop.Store(true)
		wg.Wait()
		for _, c := range conns {
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Write(get); err != nil {
				c.Close()
				continue // reset: fine
			}
			buf := make([]byte, 16)
			n, err := c.Read(buf)
			c.Close()
			if err != nil {
				continue // reset: fine
			}
			if want := fmt.Sprintf("$1\r\n%s\r\n", names[next]); string(buf[:n]) != want {
				t.Fatalf("round %d: a connection answered %q after SetTarget to %s; want %q", round, buf[:n], names[next], want)
			}
		}
	}
}
