package main

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// proxy forwards TCP connections from a loopback port to Redis, and can cut
// Redis off as a crash would: cut resets every open connection and closes
// the port, so that new connections are refused, and restore listens on the
// same port again. It works the same in front of a miniredis and a real
// Redis, which this program must not stop.
//
// A proxy is safe for concurrent use. Close stops all its goroutines.
type proxy struct {
	target, addr string
	wg           sync.WaitGroup // the accept loops and every link

	mu     sync.Mutex // guards ln, links and closed
	ln     net.Listener
	links  map[net.Conn]struct{} // both ends of every open link
	closed bool
}

func startProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{target: target, addr: ln.Addr().String(), links: map[net.Conn]struct{}{}}
	p.serve(ln)
	return p, nil
}

// Addr returns the address clients dial.
func (p *proxy) Addr() string { return p.addr }

// serve accepts on ln until it is closed. p.mu must be held or p unshared.
func (p *proxy) serve(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go p.link(c)
		}
	}()
}

// link copies between c and a new connection to Redis until either side
// ends.
func (p *proxy) link(c net.Conn) {
	defer p.wg.Done()
	up, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		reset(c)
		return
	}
	p.mu.Lock()
	if p.ln == nil || p.closed {
		p.mu.Unlock()
		reset(c)
		up.Close()
		return
	}
	p.links[c], p.links[up] = struct{}{}, struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		_, _ = io.Copy(up, c)
		up.Close()
	}()
	_, _ = io.Copy(c, up)
	c.Close()
	p.mu.Lock()
	delete(p.links, c)
	delete(p.links, up)
	p.mu.Unlock()
}

// cut drops every connection with a reset and refuses new ones.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.links {
		reset(c)
		delete(p.links, c)
	}
}

// restore accepts connections again, on the same port.
func (p *proxy) restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.ln != nil {
		return nil
	}
	var err error
	for range 20 { // the port is ours, but the kernel may take a moment
		var ln net.Listener
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			p.serve(ln)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.Join(errors.New("proxy: cannot listen again on "+p.addr), err)
}

// Close cuts everything and waits for the proxy's goroutines.
func (p *proxy) Close() {
	p.cut()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}

// reset closes c with a TCP reset rather than an orderly end of stream.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
