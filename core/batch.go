package core

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher coalesces concurrent decisions into single script calls. A caller
// that finds fewer than maxInflight round trips under way calls Redis at
// once, so an idle limiter adds no latency. Callers that arrive while all
// round trips are busy queue up; when a round trip ends, its caller hands
// the queue to the first queued caller, who sends it as one script call
// deciding every queued key in order, and wakes the others with their
// answers. No goroutine is started: the callers themselves do the work.
//
// A batch may only name keys one script can touch: on a single Redis
// server (or a Sentinel-managed one) that is any key. Cluster and Ring
// clients are not batched.
type batcher struct {
	rdb         redis.Scripter
	timeout     time.Duration // budget of a batch's round trip
	maxInflight int
	maxBatch    int

	mu       sync.Mutex
	inflight int
	queue    []*pending
}

// pending is one queued decision.
type pending struct {
	c     *call
	d     decision
	err   error
	done  chan struct{} // receives once: the answer is in, or this caller leads
	lead  []*pending    // set when this caller must send the batch
	taken bool          // removed from the queue into a batch
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

// decide decides c, alone or in a batch.
func (b *batcher) decide(ctx context.Context, c *call) (decision, error) {
	b.mu.Lock()
	if b.inflight < b.maxInflight {
		b.inflight++
		b.mu.Unlock()
		d, err := decideOne(ctx, b.rdb, c)
		b.finish()
		return d, err
	}
	p := pendingPool.Get().(*pending)
	p.c = c
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
		// Already in a batch: its answer (or leadership) is coming
		// within the batch's budget.
		<-p.done
	}
	if p.lead != nil {
		b.send(p.lead)
		b.finish()
	}
	d, err := p.d, p.err
	b.release(p)
	if cerr := ctx.Err(); cerr != nil {
		return decision{}, cerr
	}
	return d, err
}

func (b *batcher) release(p *pending) {
	*p = pending{done: p.done}
	pendingPool.Put(p)
}

// finish ends a round trip: it hands the queue, if any, to its first caller,
// who keeps the round-trip slot.
func (b *batcher) finish() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	n := min(len(b.queue), b.maxBatch)
	batch := make([]*pending, n)
	copy(batch, b.queue)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	for _, p := range batch {
		p.taken = true
	}
	b.mu.Unlock()
	batch[0].lead = batch
	batch[0].done <- struct{}{}
}

// send decides a batch in one script call and wakes its callers. The first
// member is the caller running send; it is not woken.
func (b *batcher) send(batch []*pending) {
	ctx := context.Background()
	if b.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.timeout)
		defer cancel()
	}
	keys := make([]string, len(batch))
	var args []any
	for i, p := range batch {
		keys[i] = p.c.rkey
		args = p.c.appendArgs(args)
	}
	vals, err := bucketScript.Run(ctx, b.rdb, keys, args...).Int64Slice()
	if err == nil && len(vals) != replyWidth*len(batch) {
		err = fmt.Errorf("core: unexpected script reply of %d values for %d keys", len(vals), len(batch))
	}
	for i, p := range batch {
		if err != nil {
			p.err = err
		} else {
			p.d, p.err = parseReply(vals[i*replyWidth:(i+1)*replyWidth], p.c.plan)
		}
		if i > 0 {
			p.done <- struct{}{}
		}
	}
}

// decideOne decides one call in its own script call.
func decideOne(ctx context.Context, rdb redis.Scripter, c *call) (decision, error) {
	args := c.appendArgs(make([]any, 0, 3+len(c.plan.args)))
	vals, err := bucketScript.Run(ctx, rdb, []string{c.rkey}, args...).Int64Slice()
	if err != nil {
		return decision{}, err
	}
	if len(vals) != replyWidth {
		return decision{}, fmt.Errorf("core: unexpected script reply of %d values, want %d", len(vals), replyWidth)
	}
	return parseReply(vals, c.plan)
}
