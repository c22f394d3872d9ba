package core

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher coalesces concurrent decisions into single script calls. No
// goroutine is started: the callers themselves do the work.
//
// A caller that finds a round-trip slot free (at most maxInflight round
// trips are under way at once) takes it and leads a batch. Before it forms
// the batch it yields the processor once, so that callers that are already
// runnable (typically the ones just answered by the previous batch) queue
// behind it instead of each taking a slot for one decision. It yields only
// when the last batch had company (other members, a queue or another round
// trip under way): a lone caller never does. The leader then takes
// its share of the queue: all of it when no other slot is free, otherwise an
// even part, handing the rest to the next queued caller, who leads a second
// batch on a free slot. Under load the slots therefore carry batches of
// about callers/maxInflight decisions each, and Redis works on one batch
// while the client reads or prepares another. Callers that arrive while
// every slot is busy queue; when a round trip ends, its leader hands the
// slot to the first queued caller.
//
// A batch may only name keys one script can touch. On a single Redis server
// (or a Sentinel-managed one) that is any key, so a batch is one script
// call. On Cluster and Ring clients, a batch is split by hash tag (the
// library's {tag}, so one slot and one shard each) into one script call per
// tag, all sent in one pipeline.
type batcher struct {
	rdb         redis.Scripter
	pipe        func() redis.Pipeliner // non-nil: group by tag, pipeline the groups
	timeout     time.Duration          // budget of a batch's round trip
	maxInflight int
	maxBatch    int

	mu       sync.Mutex
	inflight int  // round-trip slots taken, by leaders sending or forming
	forming  int  // leaders that hold a slot but have not formed their batch
	busy     bool // the last batch formed had company: worth yielding for
	queue    []*pending
}

// pending is one queued decision.
type pending struct {
	c        *call
	deadline time.Time // the caller's budget; zero for none
	d        decision
	err      error
	done     chan struct{} // receives once: the answer is in, or this caller leads
	lead     bool          // this caller holds a slot and must form and send a batch
	taken    bool          // removed from the queue, into a batch or to lead one
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

// decide decides c, alone or in a batch, by dl (zero for no deadline). A
// queued caller leaves when ctx ends; when dl passes first, the next leader
// to form a batch or end a round trip turns it away. That is soon after dl:
// the round trips it waits for started before it queued, and end by their
// own members' deadlines, which are no later than dl.
func (b *batcher) decide(ctx context.Context, dl time.Time, c *call) (decision, error) {
	p := pendingPool.Get().(*pending)
	p.c = c
	p.deadline = dl
	b.mu.Lock()
	if b.inflight < b.maxInflight && b.forming == 0 {
		b.inflight++
		b.forming++
		yield := b.busy
		b.mu.Unlock()
		if yield {
			runtime.Gosched() // let runnable callers queue behind this one
		}
		return b.leadAndRelease(ctx, p)
	}
	b.queue = append(b.queue, p)
	b.mu.Unlock()

	select {
	case <-p.done:
	case <-ctx.Done():
		b.mu.Lock()
		if !p.taken {
			// Still queued: leave without a trace.
			for i, q := range b.queue {
				if q == p {
					b.queue = append(b.queue[:i], b.queue[i+1:]...)
					break
				}
			}
			b.mu.Unlock()
			b.release(p)
			return decision{}, ctx.Err()
		}
		b.mu.Unlock()
		// Already in a batch, or chosen to lead one: the answer (or
		// leadership) is coming within the batch's budget.
		<-p.done
	}
	if p.lead {
		return b.leadAndRelease(ctx, p)
	}
	return b.answer(ctx, p)
}

// leadAndRelease forms p's batch, sends it, ends the round trip and returns
// p's own answer.
func (b *batcher) leadAndRelease(ctx context.Context, p *pending) (decision, error) {
	batch := b.form(p)
	if len(batch) == 1 {
		rctx, cancel := within(ctx, p.deadline)
		p.d, p.err = decideOne(rctx, b.rdb, p.c)
		cancel()
	} else {
		b.send(batch)
	}
	b.finish()
	return b.answer(ctx, p)
}

// answer returns p's result and puts p back in the pool.
func (b *batcher) answer(ctx context.Context, p *pending) (decision, error) {
	d, err := p.d, p.err
	b.release(p)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return decision{}, cerr
		}
	}
	// An answer is kept even if the caller's budget ended meanwhile (the
	// batch waited on a slower node): Redis has decided.
	return d, err
}

func (b *batcher) release(p *pending) {
	*p = pending{done: p.done}
	pendingPool.Put(p)
}

// form builds the batch that leader sends: the leader and its share of the
// queue. Queued callers whose deadline has passed stay out of it (they are
// leaving the queue on their own), so that nobody waits beyond its budget.
// If callers remain and another slot is free, the first of them is woken to
// lead the next batch.
func (b *batcher) form(leader *pending) []*pending {
	now := time.Now()
	b.mu.Lock()
	b.forming--
	free := b.maxInflight - b.inflight
	share := min(b.maxBatch, (len(b.queue)+1+free)/(free+1)) // ceil((queue+1)/(free+1))
	batch := []*pending{leader}
	var late []*pending
	rest := b.queue[:0]
	for _, p := range b.queue {
		switch {
		case !p.deadline.IsZero() && !now.Before(p.deadline):
			p.taken, p.err = true, context.DeadlineExceeded
			late = append(late, p)
		case len(batch) < share:
			p.taken = true
			batch = append(batch, p)
		default:
			rest = append(rest, p)
		}
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	b.busy = len(batch) > 1 || len(rest) > 0 || b.inflight > 1
	next := b.nextLeader(now, free > 0)
	b.mu.Unlock()
	if next != nil {
		next.done <- struct{}{}
	}
	for _, p := range late {
		p.done <- struct{}{}
	}
	return batch
}

// finish ends a round trip: it hands the slot to the first queued caller,
// if any, or frees it.
func (b *batcher) finish() {
	now := time.Now()
	b.mu.Lock()
	b.inflight--
	next := b.nextLeader(now, true)
	b.mu.Unlock()
	if next != nil {
		next.done <- struct{}{}
	}
}

// nextLeader removes the first queued caller whose deadline has not passed
// and makes it a leader holding a slot of its own, if slot allows; b.mu is
// held. Callers before it whose deadline has passed are turned away.
func (b *batcher) nextLeader(now time.Time, slot bool) *pending {
	if !slot {
		return nil
	}
	for len(b.queue) > 0 {
		p := b.queue[0]
		n := copy(b.queue, b.queue[1:])
		b.queue[n] = nil
		b.queue = b.queue[:n]
		if !p.deadline.IsZero() && !now.Before(p.deadline) {
			p.taken, p.err = true, context.DeadlineExceeded
			p.done <- struct{}{} // buffered: never blocks
			continue
		}
		p.taken, p.lead = true, true
		b.inflight++
		b.forming++
		return p
	}
	return nil
}

// ctx returns the context a batch's round trip runs under: it answers
// within its members' earliest deadline, so that no member waits longer
// than its own budget, and within the batcher's timeout otherwise. A
// deadline that has already passed (a leader can run late) does not cut the
// others' round trip short.
func (b *batcher) ctx(batch []*pending) (context.Context, context.CancelFunc) {
	now := time.Now()
	var dl time.Time
	for _, p := range batch {
		if p.deadline.After(now) && (dl.IsZero() || p.deadline.Before(dl)) {
			dl = p.deadline
		}
	}
	if dl.IsZero() && b.timeout > 0 {
		dl = now.Add(b.timeout)
	}
	if dl.IsZero() {
		return context.Background(), func() {}
	}
	return context.WithDeadline(context.Background(), dl)
}

// send decides a batch in one script call and wakes its callers. The first
// member is the caller running send; it is not woken.
func (b *batcher) send(batch []*pending) {
	ctx, cancel := b.ctx(batch)
	defer cancel()
	if b.pipe != nil {
		b.sendGrouped(ctx, batch)
	} else {
		keys, args := batchArgs(batch)
		vals, err := bucketScript.Run(ctx, b.rdb, keys, args...).Int64Slice()
		deliver(batch, vals, err)
	}
	for _, p := range batch[1:] {
		p.done <- struct{}{}
	}
}

// batchArgs lists the keys and script arguments of members, in order.
func batchArgs(members []*pending) ([]string, []any) {
	calls := make([]*call, len(members))
	for i, p := range members {
		calls[i] = p.c
	}
	return scriptArgs(calls)
}

// deliver decodes one script reply for members, or gives them its error.
func deliver(members []*pending, vals []int64, err error) {
	if err == nil && len(vals) != replyWidth*len(members) {
		err = fmt.Errorf("core: unexpected script reply of %d values for %d keys", len(vals), len(members))
	}
	for i, p := range members {
		if err != nil {
			p.err = err
			continue
		}
		p.d, p.err = parseReply(vals[i*replyWidth:(i+1)*replyWidth], p.c.plan)
	}
}

// sendGrouped decides a batch on a Cluster or Ring client: one script call
// per hash tag, keeping each tag's members in order, all in one pipeline.
func (b *batcher) sendGrouped(ctx context.Context, batch []*pending) {
	var order []string
	groups := map[string][]*pending{}
	for _, p := range batch {
		t := hashTag(p.c.rkey)
		if _, ok := groups[t]; !ok {
			order = append(order, t)
		}
		groups[t] = append(groups[t], p)
	}
	pipe := b.pipe()
	cmds := make([]*redis.Cmd, len(order))
	for i, t := range order {
		keys, args := batchArgs(groups[t])
		cmds[i] = bucketScript.EvalSha(ctx, pipe, keys, args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	for i, t := range order {
		members := groups[t]
		vals, err := cmds[i].Int64Slice()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			keys, args := batchArgs(members)
			vals, err = bucketScript.Run(ctx, b.rdb, keys, args...).Int64Slice()
		}
		deliver(members, vals, err)
	}
}

// hashTag returns the {tag} section of a stored key name.
func hashTag(rkey string) string {
	if i := strings.IndexByte(rkey, '{'); i >= 0 {
		if j := strings.IndexByte(rkey[i:], '}'); j > 0 {
			return rkey[i+1 : i+j]
		}
	}
	return rkey
}

// decideOne decides one call in its own script call.
func decideOne(ctx context.Context, rdb redis.Scripter, c *call) (decision, error) {
	args := c.appendArgs(make([]any, 0, 4+len(c.plan.args)))
	vals, err := bucketScript.Run(ctx, rdb, []string{c.rkey}, args...).Int64Slice()
	if err != nil {
		return decision{}, err
	}
	if len(vals) != replyWidth {
		return decision{}, fmt.Errorf("core: unexpected script reply of %d values, want %d", len(vals), replyWidth)
	}
	return parseReply(vals, c.plan)
}
