package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// console writes progress to stderr: a status line redrawn in place when
// stderr is a terminal, plain lines otherwise. Log lines written through it
// (sluice's own log) clear the status line first. It is safe for concurrent
// use.
type console struct {
	w   io.Writer
	tty bool

	mu     sync.Mutex
	status string
}

func newConsole(w io.Writer) *console {
	c := &console{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			c.tty = true
		}
	}
	return c
}

// Write writes p, a whole line or more, above the status line.
func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tty && c.status != "" {
		fmt.Fprint(c.w, "\r\033[K")
	}
	n, err := c.w.Write(p)
	if c.tty && c.status != "" {
		fmt.Fprint(c.w, c.status)
	}
	return n, err
}

func (c *console) println(format string, args ...any) {
	_, _ = fmt.Fprintf(c, format+"\n", args...)
}

func (c *console) setStatus(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status = s
	fmt.Fprint(c.w, "\r\033[K"+s)
}

// clear removes the status line.
func (c *console) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tty && c.status != "" {
		fmt.Fprint(c.w, "\r\033[K")
	}
	c.status = ""
}

// track reports the progress of a phase that starts at start and lasts
// length, under the loads in st, until the returned func is called.
func (c *console) track(label string, start time.Time, length time.Duration, st ...*loadStats) (stop func()) {
	counts := func() (sent, ok int64) {
		for _, s := range st {
			sent += s.sent.Load()
			ok += s.ok.Load()
		}
		return sent, ok
	}
	if !c.tty {
		c.println("%s: %v of load...", label, length)
		return func() {
			sent, ok := counts()
			c.println("%s: done, %d requests sent, %d admitted", label, sent, ok)
		}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			elapsed := max(0, time.Since(start)).Truncate(100 * time.Millisecond)
			sent, ok := counts()
			c.setStatus(fmt.Sprintf("%s: %v / %v, %d sent, %d admitted", label, min(elapsed, length), length, sent, ok))
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		c.clear()
	}
}
