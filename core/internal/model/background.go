package model

import (
	"context"
	"sync"
)

// Background runs a limiter's short background tasks (the warm-ups of
// its nodes' pools, ...), each in a goroutine of its own, under one
// context that Close cancels before it waits for them. Its zero value is
// ready to use.
type Background struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

// Run starts f in a goroutine of its own, under a context cancelled by
// Stop, and reports whether it did: not once Stop has been called.
func (b *Background) Run(f func(ctx context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	if b.ctx == nil {
		b.ctx, b.cancel = context.WithCancel(context.Background())
	}
	ctx := b.ctx
	b.wg.Go(func() { f(ctx) })
	return true
}

// Stop cancels the tasks under way, waits for them, and starts no more.
func (b *Background) Stop() {
	b.mu.Lock()
	b.closed = true
	if b.cancel != nil {
		b.cancel()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// Wait waits for the tasks under way, for tests that look at what they
// did.
func (b *Background) Wait() { b.wg.Wait() }
