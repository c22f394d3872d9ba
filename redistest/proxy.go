package redistest

import (
	"context"
	"errors"
	"fmt"
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
	// relistenTimeout bounds how long SetDown(false) tries to listen on the
	// proxy's port again.
	relistenTimeout = time.Second
)

// Proxy is an in-process TCP proxy in front of a Redis address, for
// injecting latency and outages. It is created by [NewProxy] in a test, or
// by [ListenProxy] anywhere else; the zero value is not usable.
//
// Each accepted connection gets its own connection to the target. Faults
// can be switched on and off at any time and apply to new and existing
// connections alike.
//
// A Proxy is safe for concurrent use. Its goroutines all exit before
// [Proxy.Close] returns.
type Proxy struct {
	target atomic.Pointer[string] // see SetTarget
	addr   string
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loops and every connection goroutine

	delay     atomic.Int64 // time.Duration each chunk from Redis is held after it arrived
	blackhole atomic.Bool

	mu     sync.Mutex   // guards ln, refuse, down, closed and links
	ln     net.Listener // nil while down or closed
	refuse bool
	down   bool
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
	p, err := ListenProxy(target)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// ListenProxy is [NewProxy] for code that has no testing.TB, such as example
// programs: it starts a proxy on a free 127.0.0.1 port that forwards every
// accepted connection to target, and returns an error if it cannot listen.
// The caller must call [Proxy.Close]. The target need not be up yet; while
// it is down, connections to the proxy are reset.
func ListenProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("redistest: proxy listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		addr:   ln.Addr().String(),
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		links:  make(map[*link]struct{}),
	}
	p.target.Store(&target)
	p.wg.Add(1)
	go p.serve(ln)
	return p, nil
}

// Addr returns the proxy's address, "127.0.0.1:port", for clients to dial.
// It stays the same while the proxy is down ([Proxy.SetDown]).
func (p *Proxy) Addr() string { return p.addr }

// SetDelay holds each chunk of data from Redis for d after it arrived
// before passing it to the client, in order, on new and existing
// connections: Redis is d further away, and a reply that arrives in
// several chunks is late by d once. Zero or a negative d turns the delay
// off; chunks already waiting keep the delay they started with.
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

// SetTarget makes the proxy forward new connections to target, and resets
// the existing ones, as clients see a failover that a Sentinel or a DNS
// name hides behind one address: the connections to the old master drop,
// and the next ones reach the new master.
func (p *Proxy) SetTarget(target string) {
	p.target.Store(&target)
	p.mu.Lock()
	victims := p.linksLocked()
	p.mu.Unlock()
	for _, l := range victims {
		l.close(true)
	}
}

// SetRefuse makes the proxy reset connections while on: existing ones are
// closed at once with a TCP reset, and new ones are reset as soon as they
// are accepted. Switching it off lets new connections through again.
func (p *Proxy) SetRefuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	var victims []*link
	if on {
		victims = p.linksLocked()
	}
	p.mu.Unlock()
	for _, l := range victims {
		l.close(true)
	}
}

// SetDown makes the proxy look like a Redis that has crashed while on:
// existing connections are closed at once with a TCP reset, and the proxy
// stops listening, so that new connections are refused
// (syscall.ECONNREFUSED) as they are by a port nobody listens on. Unlike
// [Proxy.SetRefuse], which accepts connections and then resets them, no
// connection is ever established. Switching it off listens again on the
// same address; that can fail if another socket took the port meanwhile,
// and then the proxy stays down and SetDown returns the error. SetDown does
// nothing when the proxy is already in the state asked for, or closed.
func (p *Proxy) SetDown(on bool) error {
	if on {
		return p.goDown()
	}
	return p.goUp()
}

// goUp is SetDown(false).
func (p *Proxy) goUp() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || !p.down {
		return nil
	}
	// The port was ours a moment ago, but a socket the kernel has not
	// released yet can hold it for a while.
	var ln net.Listener
	var err error
	deadline := time.Now().Add(relistenTimeout)
	for {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		if !waitUntil(deadline, 50*time.Millisecond) {
			return fmt.Errorf("redistest: proxy listen again on %s: %w", p.addr, err)
		}
	}
	p.down = false
	p.ln = ln
	p.wg.Add(1)
	go p.serve(ln)
	return nil
}

// goDown is SetDown(true).
func (p *Proxy) goDown() error {
	p.mu.Lock()
	if p.closed || p.down {
		p.mu.Unlock()
		return nil
	}
	p.down = true
	err := p.ln.Close()
	p.ln = nil
	victims := p.linksLocked()
	p.mu.Unlock()
	for _, l := range victims {
		l.close(true)
	}
	return err
}

// linksLocked returns the open links. p.mu must be held.
func (p *Proxy) linksLocked() []*link {
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	return links
}

// Close stops listening, closes every connection, interrupts pending delays
// and waits until all of the proxy's goroutines have exited. It returns the
// error from closing the listener. Calling Close again returns the same
// error and does nothing else.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		p.mu.Lock()
		if p.ln != nil {
			p.closeErr = p.ln.Close()
			p.ln = nil
		}
		p.closed = true
		victims := p.linksLocked()
		p.mu.Unlock()
		for _, l := range victims {
			l.close(false)
		}
		p.wg.Wait()
	})
	return p.closeErr
}

// serve accepts connections on ln until it is closed.
func (p *Proxy) serve(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
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
	target := p.target.Load()
	up, err := d.DialContext(p.ctx, "tcp", *target)
	if err != nil {
		// Pass the failure on the way a client would see a dead Redis.
		resetConn(c)
		c.Close()
		return
	}
	l := &link{client: c, upstream: up, done: make(chan struct{})}
	if !p.track(l, target) {
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
	return p.refuse || p.down || p.closed
}

// track registers l, dialled to target, unless the proxy is refusing,
// down or closed, or its target has changed since the dial: SetTarget
// stores the new target before it takes the links to reset, so a link
// dialled to the old one either is among them or is refused here, and
// no connection outlives a failover on the old master.
func (p *Proxy) track(l *link, target *string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse || p.down || p.closed || p.target.Load() != target {
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
	if fromRedis {
		p.pumpDelayed(l, src, dst)
		return
	}
	buf := make([]byte, proxyBufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.blackhole.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// chunk is data read from Redis and when it may be passed on.
type chunk struct {
	data []byte
	due  time.Time
}

// pumpDelayed copies src (Redis) to dst (the client) as a link of fixed
// latency: each chunk is passed on the delay after it was read, in order,
// so a reply that arrives in several chunks is late by the delay once,
// not once per chunk. A reader goroutine stamps the chunks; this one
// writes them.
func (p *Proxy) pumpDelayed(l *link, src, dst net.Conn) {
	chunks := make(chan chunk, 64)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(chunks)
		for {
			buf := make([]byte, proxyBufSize)
			n, err := src.Read(buf)
			if n > 0 {
				c := chunk{data: buf[:n]}
				if d := time.Duration(p.delay.Load()); d > 0 {
					c.due = time.Now().Add(d)
				}
				select {
				case chunks <- c:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if wait := time.Until(c.due); wait > 0 && !p.hold(l, wait) {
			return
		}
		if !p.blackhole.Load() {
			if _, err := dst.Write(c.data); err != nil {
				return
			}
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
