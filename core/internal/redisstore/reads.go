package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/batch"
)

// This file is what the engine reads of many buckets at once, and of a
// cap, without writing (usage reads), and the deletion of a path's
// levels: operations of kind OpPeek and OpReset on the road, like their
// one-key forms in asked.go.

// PeekMany decides a request of cost 0 on each bucket of b, writing
// nothing: bucket.lua's batch form, one call per node for all of its
// buckets (on a Cluster master or Ring shard, one call per hash tag,
// pipelined; at most maxBatch buckets a call), the nodes asked at once.
// Each node's call is judged on the road as a Peek is. A bucket whose
// read failed alone (a value of another type) fails the whole read, with
// an error naming its stored name: the store never guesses a bucket.
func (s *Store) PeekMany(ctx context.Context, b *buckets) ([]decision, error) {
	members := make([]*batch.Member[*Query, decision], len(b.Keys))
	byNode := map[*node][]*batch.Member[*Query, decision]{}
	var order []*node
	for i, key := range b.Keys {
		p, tag := b.Plans[i], key
		if b.Root != "" {
			tag = b.Root
		}
		c := &Query{Key: key, RKey: RedisKeyFrom(s.cfg.Prefix, p.FP, tag, key, s.cfg.SlotKey), Plan: p, Now: b.Now}
		c.keys[0] = c.RKey
		members[i] = &batch.Member[*Query, decision]{Req: c}
		nd := s.node(ctx, c.RKey)
		if _, ok := byNode[nd]; !ok {
			order = append(order, nd)
		}
		byNode[nd] = append(byNode[nd], members[i])
	}
	errs := make([]error, len(order))
	if len(order) == 1 {
		errs[0] = s.peekNode(ctx, order[0], byNode[order[0]], b.Now)
	} else {
		var wg sync.WaitGroup
		for i, nd := range order {
			wg.Go(func() { errs[i] = s.peekNode(ctx, nd, byNode[nd], b.Now) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return nil, err // the first node's that failed, a *noAnswer
		}
	}
	ds := make([]decision, len(members))
	for i, m := range members {
		ds[i] = m.Res
	}
	return ds, nil
}

// peekNode reads members, all of node nd, in as few calls as their hash
// tags allow, sent together under one budget; it returns nil or a
// *noAnswer.
func (s *Store) peekNode(ctx context.Context, nd *node, members []*batch.Member[*Query, decision], now int64) error {
	groups := decisionForm.groups(members, s.nodeOf != nil)
	var calls [][]*batch.Member[*Query, decision]
	for _, g := range groups {
		for len(g) > maxBatch {
			calls, g = append(calls, g[:maxBatch:maxBatch]), g[maxBatch:]
		}
		calls = append(calls, g)
	}
	var pipeline func() redis.Pipeliner
	if p, ok := s.rdb.(interface{ Pipeline() redis.Pipeliner }); ok {
		pipeline = p.Pipeline
	}
	routed, err := s.onNode(ctx, nd, now, OpPeek, members[0].Req.RKey, func(budget time.Duration) (time.Duration, error) {
		for _, m := range members {
			m.Res, m.Err = decision{}, nil
		}
		start := time.Now()
		send := func(rctx context.Context) (struct{}, error) {
			decisionForm.send(rctx, s.rdb, calls, pipeline)
			return struct{}{}, callErr(members)
		}
		if s.detached {
			_, err := runApart(ctx, budget, send)
			return time.Since(start), err
		}
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if budget > 0 {
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > budget {
				rctx, cancel = context.WithTimeout(ctx, budget)
			}
		}
		_, err := send(rctx)
		cancel()
		return time.Since(start), err
	})
	if !routed || err != nil {
		return s.unrouted(ctx, nd, now, routed, err, false)
	}
	for _, m := range members {
		if m.Err != nil {
			// The node answered; this bucket's read failed alone.
			s.keyFailed(nd, m.Req.RKey, OpPeek, m.Err)
			return &noAnswer{Node: nd.brk.node, Cause: fmt.Errorf("reading %s: %w", m.Req.RKey, m.Err)}
		}
	}
	return nil
}

// callErr returns the error of a call that carried members, if one failed
// as a whole (the node's fault, or every key's), else nil: a bucket that
// failed alone (ErrKeyFailed, or a reply out of range) is the caller's to
// report, not the node's.
func callErr(members []*batch.Member[*Query, decision]) error {
	for _, m := range members {
		if m.Err != nil && !errors.Is(m.Err, ErrKeyFailed) && !errors.Is(m.Err, errBadReply) {
			return m.Err
		}
	}
	return nil
}

// ResetMany deletes each bucket of b, a path's levels, in one call of
// reset.lua on the node of its root (every level takes the root's hash
// tag, see DecidePath).
func (s *Store) ResetMany(ctx context.Context, b *buckets) error {
	rkeys := make([]string, len(b.Keys))
	for i, key := range b.Keys {
		tag := key
		if b.Root != "" {
			tag = b.Root
		}
		rkeys[i] = RedisKeyFrom(s.cfg.Prefix, b.Plans[i].FP, tag, key, s.cfg.SlotKey)
	}
	if b.Root == "" && len(rkeys) > 1 {
		return fmt.Errorf("core: ResetMany of %d buckets without a root: their names need not share a slot", len(rkeys))
	}
	nd := s.node(ctx, rkeys[0])
	now := s.cfg.Now()
	routed, err := s.onNode(ctx, nd, now, OpReset, rkeys[0], func(budget time.Duration) (time.Duration, error) {
		_, took, err := s.runOp(ctx, nd, &op{script: ResetScript, keys: rkeys}, budget)
		return took, err
	})
	if !routed || err != nil {
		return s.unrouted(ctx, nd, now, routed, err, false)
	}
	return nil
}

//go:embed inflight.lua
var inflightLua string

// inflightScript counts a cap's live leases (see inflight.lua).
var inflightScript = redis.NewScript(clockLua + inflightLua)

// InFlight counts the slots of a.Key held under a's cap in Redis, by one
// call of inflight.lua, which writes nothing: leases that expired on
// Redis's clock are not counted, though the set still holds them until the
// next acquisition or renewal tidies it.
func (s *Store) InFlight(ctx context.Context, a slotAsk) (int, error) {
	rkey := s.RKey(a.FP, a.Key)
	nd := s.node(ctx, rkey)
	now := s.cfg.Now()
	var vals []int64
	routed, err := s.onNode(ctx, nd, now, OpPeek, rkey, func(budget time.Duration) (time.Duration, error) {
		var took time.Duration
		var err error
		vals, took, err = s.runOp(ctx, nd, &op{script: inflightScript, keys: []string{rkey}}, budget)
		switch {
		case err != nil:
		case len(vals) == 1 && vals[0] == -1:
			err = fmt.Errorf("%w: the cap's key %s holds a value of another type", errBadReply, rkey)
		case len(vals) != 1 || vals[0] < 0:
			err = fmt.Errorf("%w %v from the in-flight script", errBadReply, vals)
		}
		return took, err
	})
	if !routed || err != nil {
		return 0, s.unrouted(ctx, nd, now, routed, err, false)
	}
	return int(vals[0]), nil
}
