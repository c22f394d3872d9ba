// Package batch coalesces concurrent requests to one store node into
// batches, without ever making one caller's fate another's.
//
// A [Batcher] has one entry point, [Batcher.Do]: a caller hands it a
// request and gets back its own result, or its own context's error. The
// callers do the work themselves; the batcher starts a goroutine only for
// the rare batch whose leader may have to leave before the batch's answer
// (see "Leaders" below). A caller that would lead a batch of one on an
// idle batcher may instead take the slot with [Batcher.Alone], send its
// request itself, and free the slot with [Batcher.Done]: a slot held so
// counts as a batch in flight for every rule below. On a batcher idle
// since its last batch, both go through a door, one compare-and-swap
// each; any other call shuts the door under the mutex first, counting a
// slot held through it as taken (see Batcher.lock).
//
// # Slots, leaders and batches
//
// At most maxInflight batches are under way at once; each holds a slot. A
// caller that finds a slot free takes it and leads a batch: it forms the
// batch from itself and its share of the queue, and sends it. Callers that
// find no slot free queue. When a batch ends, its slot goes to the first
// queued caller, who leads the next batch. A leader that forms while other
// slots are free takes an even share of the queue and wakes the next queued
// caller to lead on a free slot, so under load every slot carries a batch.
// Before forming, a leader yields the processor once if the last batch had
// company (callers queued for it, or every slot taken when it formed), so
// that callers already runnable queue behind it; a lone caller, or a few
// callers on free slots, never yield.
//
// # Deadlines
//
// Each caller's deadline is its own. A batch's I/O runs under the batcher's
// budget counted from the moment the batch is sent, never under a member's
// deadline, so one impatient caller cannot fail the others, and time spent
// queued for a slot is never charged to the store. A batch of one whose
// leader has at least the budget left runs under the leader's own context,
// bounded by the budget: the caller is the only one concerned. A caller
// whose context ends leaves at once with its context's error, wherever it
// is: queued (it is removed), chosen to lead (it hands the slot on) or in a
// batch in flight (it abandons its place; its request may still reach the
// store, which for a rate limiter errs toward denying, never admitting).
//
// # States of one request (a member)
//
//	state      held by             leaves by
//	---------  ------------------  ------------------------------------------------
//	queued     the queue           taken into a batch (in batch); chosen to lead
//	                               (leading); its deadline passed when a leader
//	                               forms or a slot frees (answered with
//	                               context.DeadlineExceeded); its context ends
//	                               (gone: removed from the queue by its caller)
//	leading    its caller          forms its batch (in batch); its context ends
//	                               before it forms (gone: the slot is handed on)
//	in batch   the batch's sender  answered (the sender delivers); its context
//	                               ends first (abandoned: the sender recycles it)
//	answered   its caller          the caller returns the result and recycles it
//
// # Invariants
//
//  1. At most maxInflight slots are taken; each is held by one leader that
//     has not formed yet or by one batch in flight, and is freed exactly
//     once, when that batch's I/O has ended.
//  2. No slot stays free while a live caller is queued: freeing a slot and
//     forming a batch with free slots left both wake the first live queued
//     caller to lead.
//  3. Every member gets exactly one answer (result, store error, or its own
//     context's error), and it is delivered once, by exactly one party.
//  4. A batch's I/O is bounded by the budget from its send; a member waits
//     at most its own deadline, or else for the batches ahead of it plus
//     its own batch's budget.
//  5. A member's memory is recycled only after both its caller and its
//     batch's sender are done with it.
//  6. A batch never holds more than maxBatch members.
package batch

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Member is one request in a batch. The [Sender] reads Req and sets Res and
// Err; everything else belongs to the batcher.
type Member[Req, Res any] struct {
	Req Req
	Res Res
	Err error

	deadline time.Time // the caller's; zero for none
	took     time.Duration
	dctx     deadlineCtx   // the lone request's context, when timerless
	done     chan struct{} // receives once: answered, or chosen to lead
	state    atomic.Int32  // of a member in a batch: waiting, answered, abandoned
	lead     bool          // guarded by Batcher.mu
	taken    bool          // out of the queue; guarded by Batcher.mu
	self     [1]*Member[Req, Res]
}

// Delivery states of a member in a batch.
const (
	waiting int32 = iota
	answered
	abandoned
)

// Sender sends one batch to the store within ctx and sets each member's Res
// or Err. It must set one of them for every member and return only when it
// is done with all of them. ctx carries the batch's deadline.
type Sender[Req, Res any] func(ctx context.Context, batch []*Member[Req, Res])

// Config sets a Batcher's limits.
type Config struct {
	// Budget bounds a batch's I/O from the moment it is sent; 0 for no
	// bound beyond the store client's own.
	Budget time.Duration
	// MaxInflight is how many batches may be under way at once (at
	// least 1); MaxBatch how many members one may hold (at least 1).
	MaxInflight, MaxBatch int
	// Timerless carries the budget to the store as a deadline only
	// (ctx.Deadline), without the timer that would close ctx.Done at
	// it. Set it only when the store's I/O honours deadlines by itself
	// (socket deadlines), so that nothing waits on Done alone: it saves
	// a timer and four allocations per lone request.
	Timerless bool
	// Timed measures each batch's I/O for Do's second result;
	// otherwise that result is 0.
	Timed bool
}

// Batcher coalesces concurrent requests into batches sent by one [Sender].
// Its zero value is not usable; create one with [New]. It is safe for
// concurrent use and needs no closing.
type Batcher[Req, Res any] struct {
	send        Sender[Req, Res]
	budget      time.Duration // a batch's I/O, from its send; 0 for none
	maxInflight int
	maxBatch    int
	timerless   bool
	timed       bool
	pool        sync.Pool

	// door is the idle batcher's fast path for Alone and Done (see
	// lock): doorOpen while the state below is idle (no slot taken, no
	// leader forming, nobody queued, not busy), doorHeld while a caller
	// holds the slot Alone took through it, doorShut otherwise.
	door atomic.Int32

	mu       sync.Mutex
	inflight int  // slots taken
	forming  int  // leaders holding a slot that have not formed yet
	busy     bool // the last batch formed had company: worth yielding for
	queue    []*Member[Req, Res]
}

// States of Batcher.door.
const (
	doorShut int32 = iota
	doorOpen
	doorHeld
)

// lock takes b.mu and shuts the door: from here to unlock, the state
// under mu is the whole truth. A slot held through the door becomes an
// ordinary one, which its holder's Done then frees through finish.
func (b *Batcher[Req, Res]) lock() {
	b.mu.Lock()
	for {
		switch d := b.door.Load(); {
		case d == doorShut:
			return
		case b.door.CompareAndSwap(d, doorShut):
			if d == doorHeld {
				b.inflight++
			}
			return
		}
	}
}

// unlock opens the door if b is idle and releases b.mu. With one slot
// only, Alone must mark the batcher busy, which the door cannot: it stays
// shut.
func (b *Batcher[Req, Res]) unlock() {
	if b.inflight == 0 && b.forming == 0 && len(b.queue) == 0 && !b.busy && b.maxInflight > 1 {
		b.door.Store(doorOpen)
	}
	b.mu.Unlock()
}

// New returns a Batcher that sends through send within cfg's limits.
func New[Req, Res any](send Sender[Req, Res], cfg Config) *Batcher[Req, Res] {
	b := &Batcher[Req, Res]{send: send, budget: max(0, cfg.Budget), maxInflight: max(1, cfg.MaxInflight),
		maxBatch: max(1, cfg.MaxBatch), timerless: cfg.Timerless, timed: cfg.Timed}
	if b.maxInflight > 1 {
		b.door.Store(doorOpen) // idle (see unlock)
	}
	b.pool.New = func() any {
		m := &Member[Req, Res]{done: make(chan struct{}, 1)}
		m.self[0] = m
		return m
	}
	return b
}

// Do sends req, alone or in a batch, and returns its result and how long
// the store I/O that decided it took. It returns ctx's error if ctx ends
// first (ctx.Err(), or context.DeadlineExceeded once ctx's deadline has
// passed), and otherwise whatever the Sender set.
func (b *Batcher[Req, Res]) Do(ctx context.Context, req Req) (Res, time.Duration, error) {
	m := b.pool.Get().(*Member[Req, Res])
	m.Req = req
	if dl, ok := ctx.Deadline(); ok {
		m.deadline = dl
	}
	b.lock()
	if b.inflight < b.maxInflight && b.forming == 0 {
		b.inflight++
		b.forming++
		yield := b.busy
		b.unlock()
		if yield {
			runtime.Gosched() // let runnable callers queue behind this one
		}
		return b.lead(ctx, m)
	}
	b.queue = append(b.queue, m)
	b.unlock()

	select {
	case <-m.done:
		if m.lead {
			return b.lead(ctx, m)
		}
		return b.answer(m)
	case <-ctx.Done():
		return b.leave(ctx, m)
	}
}

// Alone takes a slot for a request its caller sends by itself, in its own
// goroutine, when that is what Do would do with it: a slot is free, no
// leader is forming a batch, nobody is queued, and the last batch had no
// company (nothing to gain by yielding for one). It reports whether it
// took the slot; the caller then sends the request alone, within the
// budget, and gives the slot back with Done once its I/O has ended. It
// saves a lone request the member, the batch and the sender's layers that
// Do goes through to come to the same thing.
//
// On an idle batcher it takes the slot through the door (see lock): one
// compare-and-swap, inlined, where the mutex's code cost a lone request
// code lines from cold (clientcost -cold).
func (b *Batcher[Req, Res]) Alone() bool {
	return b.door.CompareAndSwap(doorOpen, doorHeld) || b.alone()
}

// alone is Alone when the door is not open.
func (b *Batcher[Req, Res]) alone() bool {
	b.lock()
	ok := b.inflight < b.maxInflight && b.forming == 0 && len(b.queue) == 0 && !b.busy
	if ok {
		b.inflight++
		// As form for a leader alone: worth yielding for next time only
		// if every slot is taken.
		b.busy = b.inflight >= b.maxInflight
	}
	b.unlock()
	return ok
}

// Done gives back the slot Alone took, to the first queued caller if any:
// through the door if it took it there and nobody has shut it since.
func (b *Batcher[Req, Res]) Done() {
	if !b.door.CompareAndSwap(doorHeld, doorOpen) {
		b.finish()
	}
}

// leave handles a queued caller whose context ended.
func (b *Batcher[Req, Res]) leave(ctx context.Context, m *Member[Req, Res]) (Res, time.Duration, error) {
	var zero Res
	b.lock()
	if !m.taken {
		for i, q := range b.queue {
			if q == m {
				b.queue = slices.Delete(b.queue, i, i+1) // clears the vacated element
				break
			}
		}
		b.unlock()
		b.recycle(m)
		return zero, 0, ctx.Err()
	}
	lead := m.lead
	b.unlock()
	if lead {
		// Chosen to lead: hand the slot on. The wake-up is on its way.
		<-m.done
		b.lock()
		b.forming--
		b.unlock()
		b.finish()
		b.recycle(m)
		return zero, 0, ctx.Err()
	}
	// In a batch, or turned away: leave unless the answer is already in.
	if m.state.CompareAndSwap(waiting, abandoned) {
		return zero, 0, ctx.Err() // the sender recycles m
	}
	<-m.done
	return b.answer(m)
}

// lead forms m's batch and sends it. A lone request whose caller has at
// least the budget left runs in the caller's goroutine, under the caller's
// context bounded by the budget: nothing else is at stake. Otherwise the
// batch runs under the budget from now, and if m's context can end first,
// in a goroutine of its own, so that m can leave on time while the batch's
// I/O goes on for the others (and, alone, so that a short deadline does not
// cut a connection's reply short and make the client dial again).
func (b *Batcher[Req, Res]) lead(ctx context.Context, m *Member[Req, Res]) (Res, time.Duration, error) {
	batch := b.form(m)
	if len(batch) == 1 && (b.budget == 0 || m.deadline.IsZero() || time.Until(m.deadline) >= b.budget) {
		var start time.Time
		if b.timed || (b.timerless && b.budget > 0) {
			start = time.Now()
		}
		bctx, cancel := ctx, context.CancelFunc(nil)
		switch {
		case b.budget == 0:
		case b.timerless:
			m.dctx = deadlineCtx{Context: ctx, dl: start.Add(b.budget)}
			bctx = &m.dctx
		default:
			bctx, cancel = context.WithTimeout(ctx, b.budget)
		}
		b.send(bctx, batch)
		if b.timed {
			m.took = time.Since(start)
		}
		if cancel != nil {
			cancel()
		}
		m.dctx = deadlineCtx{}
		b.finish()
		return b.answer(m)
	}
	if ctx.Done() == nil {
		b.run(batch, m) // m cannot leave early: no need for a goroutine
		return b.answer(m)
	}
	go b.run(batch, nil)
	select {
	case <-m.done:
	case <-ctx.Done():
		if m.state.CompareAndSwap(waiting, abandoned) {
			var zero Res
			return zero, 0, ctx.Err() // run recycles m
		}
		<-m.done
	}
	return b.answer(m)
}

// run sends batch under the budget, delivers every member's answer but
// self's (the caller running it, if any) and frees the slot.
func (b *Batcher[Req, Res]) run(batch []*Member[Req, Res], self *Member[Req, Res]) {
	start := time.Now()
	ctx, cancel := context.Background(), context.CancelFunc(nil)
	switch {
	case b.budget == 0:
	case b.timerless:
		ctx = &deadlineCtx{Context: ctx, dl: start.Add(b.budget)}
	default:
		ctx, cancel = context.WithTimeout(ctx, b.budget)
	}
	b.send(ctx, batch)
	var took time.Duration
	if b.timed {
		took = time.Since(start)
	}
	if cancel != nil {
		cancel()
	}
	b.finish()
	for _, m := range batch {
		m.took = took
		if m != self {
			b.deliver(m)
		}
	}
}

// deliver signals that m's answer is in, or recycles m if its caller has
// left.
func (b *Batcher[Req, Res]) deliver(m *Member[Req, Res]) {
	if m.state.CompareAndSwap(waiting, answered) {
		m.done <- struct{}{}
		return
	}
	b.recycle(m)
}

// answer returns m's result and recycles m.
func (b *Batcher[Req, Res]) answer(m *Member[Req, Res]) (Res, time.Duration, error) {
	res, took, err := m.Res, m.took, m.Err
	b.recycle(m)
	return res, took, err
}

func (b *Batcher[Req, Res]) recycle(m *Member[Req, Res]) {
	var zero Res
	var zreq Req
	m.Req, m.Res, m.Err = zreq, zero, nil
	m.deadline, m.took = time.Time{}, 0
	m.lead, m.taken = false, false
	m.state.Store(waiting)
	b.pool.Put(m)
}

// form builds the batch that leader sends: the leader and its share of the
// queue. Queued callers whose deadline has passed are turned away rather
// than sent. If callers remain and another slot is free, the first of them
// is woken to lead the next batch.
func (b *Batcher[Req, Res]) form(leader *Member[Req, Res]) []*Member[Req, Res] {
	var late []*Member[Req, Res]
	b.lock()
	b.forming--
	if len(b.queue) == 0 { // alone: the usual case when idle
		// Worth yielding for only if the next caller would queue: every
		// slot is taken. With slots free (two callers on four slots, say)
		// it would take one and send alone, and the yield would only
		// cost a trip through the scheduler per call.
		b.busy = b.inflight >= b.maxInflight
		b.unlock()
		return leader.self[:]
	}
	now := time.Now()
	free := b.maxInflight - b.inflight
	share := min(b.maxBatch, (len(b.queue)+1+free)/(free+1)) // ceil((queue+1)/(free+1))
	batch := leader.self[:]
	if share > 1 && len(b.queue) > 0 {
		batch = make([]*Member[Req, Res], 1, share)
		batch[0] = leader
	}
	rest := b.queue[:0]
	for _, m := range b.queue {
		switch {
		case expired(m, now):
			m.taken = true
			late = append(late, m)
		case len(batch) < share:
			m.taken = true
			batch = append(batch, m)
		default:
			rest = append(rest, m)
		}
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	b.busy = len(batch) > 1 || len(rest) > 0 || b.inflight > 1
	next := b.nextLeader(now, free > 0, &late)
	b.unlock()
	b.wake(next, late)
	return batch
}

// finish frees a slot: it hands it to the first live queued caller, if any.
func (b *Batcher[Req, Res]) finish() {
	var late []*Member[Req, Res]
	b.lock()
	b.inflight--
	if len(b.queue) == 0 {
		b.unlock()
		return
	}
	next := b.nextLeader(time.Now(), true, &late)
	b.unlock()
	b.wake(next, late)
}

// nextLeader, if slot allows, removes the first live queued caller and
// makes it a leader holding a slot of its own; b.mu is held. Callers
// before it whose deadline has passed are added to late.
func (b *Batcher[Req, Res]) nextLeader(now time.Time, slot bool, late *[]*Member[Req, Res]) *Member[Req, Res] {
	if !slot {
		return nil
	}
	for len(b.queue) > 0 {
		m := b.queue[0]
		n := copy(b.queue, b.queue[1:])
		b.queue[n] = nil
		b.queue = b.queue[:n]
		m.taken = true
		if expired(m, now) {
			*late = append(*late, m)
			continue
		}
		m.lead = true
		b.inflight++
		b.forming++
		return m
	}
	return nil
}

// wake signals a new leader and turns late callers away.
func (b *Batcher[Req, Res]) wake(next *Member[Req, Res], late []*Member[Req, Res]) {
	if next != nil {
		next.done <- struct{}{} // buffered: never blocks
	}
	for _, m := range late {
		m.Err = context.DeadlineExceeded
		b.deliver(m)
	}
}

func expired[Req, Res any](m *Member[Req, Res], now time.Time) bool {
	return !m.deadline.IsZero() && !now.Before(m.deadline)
}

// deadlineCtx carries a deadline without a timer: Done is the parent's, and
// Err reports context.DeadlineExceeded once the deadline has passed. It is
// used only where the I/O enforces the deadline itself (see
// Config.Timerless).
type deadlineCtx struct {
	context.Context
	dl time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.dl, true }

func (c *deadlineCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.dl) {
		return context.DeadlineExceeded
	}
	return nil
}
