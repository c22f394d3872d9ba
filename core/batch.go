package core

import (
	"context"
	"fmt"
	"strings"
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
	inflight int
	queue    []*pending
}

// pending is one queued decision.
type pending struct {
	c        *call
	deadline time.Time // the caller's budget; zero for none
	d        decision
	err      error
	done     chan struct{} // receives once: the answer is in, or this caller leads
	lead     []*pending    // set when this caller must send the batch
	taken    bool          // removed from the queue into a batch
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
	p.deadline, _ = ctx.Deadline()
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

// finish ends a round trip: it hands the queue, if any, to its first caller,
// who keeps the round-trip slot. Callers whose deadline has passed stay out
// of the batch (they are leaving the queue on their own), so that nobody
// waits beyond its budget.
func (b *batcher) finish() {
	now := time.Now()
	b.mu.Lock()
	var batch []*pending
	rest := b.queue[:0]
	for _, p := range b.queue {
		if len(batch) < b.maxBatch && (p.deadline.IsZero() || now.Before(p.deadline)) {
			p.taken = true
			batch = append(batch, p)
		} else {
			rest = append(rest, p)
		}
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	if len(batch) == 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	batch[0].lead = batch
	batch[0].done <- struct{}{}
}

// send decides a batch in one script call and wakes its callers. The first
// member is the caller running send; it is not woken.
func (b *batcher) send(batch []*pending) {
	// The batch answers within its members' earliest deadline, so that no
	// member waits longer than its own budget.
	var dl time.Time
	for _, p := range batch {
		if !p.deadline.IsZero() && (dl.IsZero() || p.deadline.Before(dl)) {
			dl = p.deadline
		}
	}
	if dl.IsZero() && b.timeout > 0 {
		dl = time.Now().Add(b.timeout)
	}
	ctx := context.Background()
	if !dl.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
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
	keys := make([]string, len(members))
	var args []any
	for i, p := range members {
		keys[i] = p.c.rkey
		args = p.c.appendArgs(args)
	}
	return keys, args
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
