package redistest

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// proxyDialTimeout bounds the proxy's dial to its target.
	proxyDialTimeout = 5 * time.Second
	// proxyBufSize is the largest chunk the proxy reads and forwards at once.
	proxyBufSize = 32 << 10
)

// Proxy is an in-process TCP proxy in front of a Redis address, for
// injecting latency and outages. It is created by [NewProxy]; the zero value
// is not usable.
//
// Each accepted connection gets its own connection to the target. Faults
// can be switched on and off at any time and apply to new and existing
// connections alike.
//
// A Proxy is safe for concurrent use. Its goroutines all exit before
// [Proxy.Close] returns.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection goroutine

	delay     atomic.Int64 // time.Duration added before each chunk from Redis
	blackhole atomic.Bool

	mu     sync.Mutex // guards refuse, closed and links
	refuse bool
	closed bool
	links  map[*link]struct{}

	closeOnce sync.Once
	closeErr  error
}

// link is one proxied connection: a client and its connection to Redis.
type link struct {
	client   net.Conn
	upstream net.Conn
	done     chan struct{} // closed by close
	once     sync.Once
}

// close closes both sides. With reset, the client sees a TCP reset rather
// than an orderly end of stream.
func (l *link) close(reset bool) {
	l.once.Do(func() {
		if reset {
			resetConn(l.client)
		}
		l.client.Close()
		l.upstream.Close()
		close(l.done)
	})
}

// resetConn makes the next Close send RST instead of FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}

// NewProxy starts a proxy on a free 127.0.0.1 port that forwards every
// accepted connection to target, and closes it at tb.Cleanup. It calls
// tb.Fatal if it cannot listen. The target need not be up yet; while it is
// down, connections to the proxy are reset.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: proxy listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		links:  make(map[*link]struct{}),
	}
	p.wg.Add(1)
	go p.serve()
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr returns the proxy's address, "127.0.0.1:port", for clients to dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay holds each chunk of data from Redis for d before passing it to
// the client, on new and existing connections. A reply that arrives in one
// chunk is delayed by d; a large reply may arrive in several and be delayed
// several times. Zero or a negative d turns the delay off; chunks already
// waiting keep the delay they started with.
func (p *Proxy) SetDelay(d time.Duration) {
	p.delay.Store(int64(max(d, 0)))
}

// SetBlackhole makes the proxy act like a hung Redis while on: connections
// are accepted and data is read from both sides, but nothing is forwarded,
// so clients wait until their timeouts. Data read while the blackhole is on
// is dropped for good, so a connection that was mid-command when it was
// switched on stays out of step; clients normally discard a connection
// after a timeout.
func (p *Proxy) SetBlackhole(on bool) {
	p.blackhole.Store(on)
}

// SetRefuse makes the proxy reset connections while on: existing ones are
// closed at once with a TCP reset, and new ones are reset as soon as they
// are accepted. Switching it off lets new connections through again.
func (p *Proxy) SetRefuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	var victims []*link
	if on {
		for l := range p.links {
			victims = append(victims, l)
		}
	}
	p.mu.Unlock()
	for _, l := range victims {
		l.close(true)
	}
}

// Close stops listening, closes every connection, interrupts pending delays
// and waits until all of the proxy's goroutines have exited. It returns the
// error from closing the listener. Calling Close again returns the same
// error and does nothing else.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		p.closeErr = p.ln.Close()
		p.mu.Lock()
		p.closed = true
		victims := make([]*link, 0, len(p.links))
		for l := range p.links {
			victims = append(victims, l)
		}
		p.mu.Unlock()
		for _, l := range victims {
			l.close(false)
		}
		p.wg.Wait()
	})
	return p.closeErr
}

// serve accepts connections until the listener is closed.
func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A temporary failure such as running out of descriptors:
			// back off briefly instead of spinning.
			t := time.NewTimer(10 * time.Millisecond)
			select {
			case <-t.C:
			case <-p.ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// handle proxies one client connection until either side closes it.
func (p *Proxy) handle(c net.Conn) {
	defer p.wg.Done()
	if p.refusing() {
		resetConn(c)
		c.Close()
		return
	}
	d := net.Dialer{Timeout: proxyDialTimeout}
	up, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		// Pass the failure on the way a client would see a dead Redis.
		resetConn(c)
		c.Close()
		return
	}
	l := &link{client: c, upstream: up, done: make(chan struct{})}
	if !p.track(l) {
		l.close(true)
		return
	}
	defer p.untrack(l)

	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.pump(l, up, c, true)
	}()
	p.pump(l, c, up, false)
	<-l.done
}

func (p *Proxy) refusing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refuse || p.closed
}

// track registers l, unless the proxy is refusing or closed.
func (p *Proxy) track(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse || p.closed {
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Proxy) untrack(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pump copies src to dst until either fails or l is closed, applying the
// current faults to each chunk. fromRedis marks the direction that is
// delayed. It closes l when it stops.
func (p *Proxy) pump(l *link, src, dst net.Conn, fromRedis bool) {
	defer l.close(false)
	buf := make([]byte, proxyBufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromRedis {
				if d := time.Duration(p.delay.Load()); d > 0 && !p.hold(l, d) {
					return
				}
			}
			if !p.blackhole.Load() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// hold waits for d, and reports false if l or the proxy closed meanwhile.
func (p *Proxy) hold(l *link, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	case <-p.ctx.Done():
		return false
	}
}
