package core

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core/internal/batch"
)

// This file is what the engine asks of the Redis store (see store): each
// question is routed to the node that owns its key and sent on the road
// (see Limiter.onNode), and its outcome is turned into the store's answer,
// or a *noAnswer. What an answer entails on
// Redis (the fallback's copy of a busy key kept warm, idle nodes retired,
// the implicit fleet's heartbeat) is done here, before the engine sees it.

// unrouted returns the store's error for a call on nd that the road
// routed (routed) and that ended with err, which is not nil unless routed
// is false. A question that would have decided a request (degrades)
// counts on nd's breaker as decided without it, and keeps the outage log
// going.
func (s *redisStore) unrouted(ctx context.Context, nd *node, now int64, routed bool, err error, degrades bool) *noAnswer {
	if cerr := callerGone(ctx); routed && cerr != nil {
		return &noAnswer{node: nd.brk.node, gone: cerr}
	}
	if degrades {
		nd.brk.degraded.Add(1)
		s.l.stillDown(nd.brk, now)
	}
	if !routed {
		err = nil
	}
	return &noAnswer{node: nd.brk.node, cause: err}
}

func (s *redisStore) decide(ctx context.Context, key string, p *plan, cost, maxWait, penalty, now int64) (decision, *noAnswer) {
	return s.ask(ctx, OpDecide, call{key: key, plan: p, cost: cost, maxWait: maxWait, penalty: penalty, now: now})
}

func (s *redisStore) peek(ctx context.Context, key string, p *plan, now int64) (decision, *noAnswer) {
	return s.ask(ctx, OpPeek, call{key: key, plan: p, now: now})
}

// ask sends c, a decision of kind OpDecide or OpPeek, to the node of its
// key.
func (s *redisStore) ask(ctx context.Context, kind string, c call) (decision, *noAnswer) {
	l, p := s.l, c.plan
	c.rkey = l.rkey(p.fp, c.key)
	c.keys[0] = c.rkey
	nd := s.node(ctx, c.rkey)
	d, routed, err := l.decideOn(ctx, nd, c.now, kind, &c)
	if !routed || err != nil {
		return decision{}, s.unrouted(ctx, nd, c.now, routed, err, kind == OpDecide)
	}
	if kind != OpDecide {
		return d, nil
	}
	l.maybeSweep(ctx, c.now)
	if l.fleet != nil && l.fleet.implicit {
		l.fleet.maybeBeat(l.bg.run)
	}
	if d.allowed {
		// Keep the fallback warm for keys that have used half a burst
		// or more; one less used starts the fallback from a full
		// bucket, which it nearly is, and costs no memory.
		l.local.charge(p.id, c.key, c.now, l.share(p).ticks, c.cost, 2*d.remaining < int64(p.limits[d.index].Burst))
	}
	return d, nil
}

func (s *redisStore) decidePath(ctx context.Context, q *pathAsk) (decision, int, error) {
	l, pd := s.l, q.pd
	pd.rkeys = make([]string, len(q.plans))
	root := pd.keys[0]
	args := make([]any, 1, 1+len(q.plans)*12)
	args[0] = strconv.Itoa(len(q.plans))
	for i, p := range q.plans {
		pd.rkeys[i] = redisKeyFrom(l.prefix, p.fp, root, pd.keys[i], l.slotKey)
		c := call{plan: p, cost: q.cost, penalty: q.penalty, now: q.now}
		args = c.appendGroup(args)
	}
	pc := &pathCall{rkeys: pd.rkeys, args: args, plans: q.plans}
	nd := s.node(ctx, pd.rkeys[0])
	var ans pathAnswer
	routed, err := l.onNode(ctx, nd, q.now, OpPath, pd.rkeys[0], func() (time.Duration, error) {
		var took time.Duration
		var err error
		ans, took, err = s.submitPath(ctx, nd, pc, l.timeout)
		return took, err
	})
	if !routed || err != nil {
		return decision{}, 0, s.unrouted(ctx, nd, q.now, routed, err, true)
	}
	d, lv := ans.d, ans.lv
	if ans.foreign > 0 {
		l.foreignLevel(nd, pd.rkeys[ans.foreign-1], q.r.names[ans.foreign-1])
	}
	l.maybeSweep(ctx, q.now)
	if d.allowed {
		for i, p := range q.plans {
			l.local.charge(p.id, pd.keys[i], q.now, l.share(p).ticks, q.cost, 2*d.remaining < int64(q.plans[lv].limits[d.index].Burst))
		}
	}
	return d, lv, nil
}

func (s *redisStore) reset(ctx context.Context, p *plan, key string) error {
	l := s.l
	rkey := l.rkey(p.fp, key)
	nd := s.node(ctx, rkey)
	now := l.now()
	routed, err := l.onNode(ctx, nd, now, OpReset, rkey, func() (time.Duration, error) {
		_, took, err := s.runOp(ctx, nd, &op{script: resetScript, keys: []string{rkey}}, l.timeout)
		return took, err
	})
	if !routed || err != nil {
		return s.unrouted(ctx, nd, now, routed, err, false)
	}
	return nil
}

// reserved names rv's markers in Redis, where its settlement goes.
func (s *redisStore) reserved(rv *Reservation) {
	rv.via, rv.held, rv.id = settleStore, rv.n, newReservationID()
}

func (s *redisStore) inProcess() bool { return false }

// acquire takes a slot of key in Redis, under a lease the keeper renews.
func (s *redisStore) acquire(ctx context.Context, c *Concurrency, key string) (*Lease, error) {
	l := s.l
	rkey := l.rkey(c.fp, key)
	now := l.now()
	nd := s.node(ctx, rkey)
	id := newLeaseID()
	var vals []int64
	seen := l.keeper().server(nd)
	args := []any{c.limit.Max, c.lease.Milliseconds(), id, seen.lastsave, seen.run, seen.restart, int64(-1)}
	if s.reload != nil { // a Cluster (see acquire.lua)
		args[6] = seen.myid
	}
	if seen.run == 0 { // first contact: the script compares histories
		args = l.keeper().histories(nd, args)
	}
	o := op{script: acquireScript, keys: []string{rkey}, args: args}
	send := func() (time.Duration, error) {
		var took time.Duration
		var err error
		vals, took, err = s.runOp(ctx, nd, &o, l.timeout)
		if err == nil && (len(vals) != 9 || vals[0] < 0 || vals[0] > 1 || vals[1] < 0) {
			err = fmt.Errorf("%w %v from the concurrency script", errBadReply, vals)
		}
		if err == nil {
			l.foreignLease(rkey, vals[2])
			l.keeper().saw(nd, serverSeen{lastsave: vals[3], run: vals[4], restart: vals[5], replid: vals[7], myid: vals[8]}, vals[6] == 1)
		}
		return took, err
	}
	routed, err := l.onNode(ctx, nd, now, OpAcquire, rkey, send)
	if routed && err != nil && ErrorReason(err) == ReasonTimeout && callerGone(ctx) == nil {
		// The answer was lost to a stall of Redis, and Redis may have
		// given the slot: ask once more with the same id, which takes no
		// second slot, rather than let the fallback add one beside it.
		// (onNode itself asks again after a pause of this process.)
		routed, err = l.onNode(ctx, nd, l.now(), OpAcquire, rkey, send)
	}
	if routed && err != nil && (ErrorReason(err) == ReasonTimeout || callerGone(ctx) != nil) {
		// Redis may hold the slot though nobody heard it was given:
		// the keeper gives it back, or it would keep one of Max for a
		// whole lease after a blip.
		l.keeper().orphan(c, rkey, id)
	}
	if !routed || err != nil {
		return nil, s.unrouted(ctx, nd, now, routed, err, true)
	}
	ls := &Lease{Acquired: vals[0] == 1, InFlight: int(vals[1]), c: c, key: key}
	if ls.Acquired {
		ls.rkey, ls.id = rkey, id
		l.keeper().add(ls, time.Now().Add(c.lease))
	}
	return ls, nil
}

// settle applies final to rv, a reservation Redis admitted, by one call
// of settle.lua on the node of its key (a path's: of its root), and
// reports whether it was applied (false: its marker says it had been).
func (s *redisStore) settle(ctx context.Context, rv *Reservation, final int64, marker time.Duration) (bool, error) {
	if rv.path != nil {
		return s.settlePath(ctx, rv, final, marker)
	}
	l, p := s.l, rv.p
	delta := final - rv.n
	rkey := l.rkey(p.fp, rv.key)
	sc := &settleCall{keys: [2]string{rkey, markerKey(rkey, l.prefix, p.fp, rv.id)}, delta: delta, marker: marker.Milliseconds(), plan: p}
	nd := s.node(ctx, rkey)
	var applied bool
	routed, err := l.onNode(ctx, nd, l.now(), OpSettle, rkey, func() (time.Duration, error) {
		start := time.Now()
		var err error
		switch {
		case s.detached:
			applied, err = runApart(ctx, l.timeout, func(ctx context.Context) (bool, error) { return settleOne(ctx, s.rdb, sc) })
		case nd.settle != nil:
			var took time.Duration
			applied, took, err = nd.settle.Do(ctx, sc)
			return took, err
		default:
			rctx, cancel := ctx, context.CancelFunc(func() {})
			if l.timeout > 0 {
				rctx, cancel = context.WithTimeout(ctx, l.timeout)
			}
			applied, err = settleOne(rctx, s.rdb, sc)
			cancel()
		}
		return time.Since(start), err
	})
	if !routed || err != nil {
		return false, s.unrouted(ctx, nd, l.now(), routed, err, false)
	}
	return applied, nil
}

// settlePath is settle for a path's reservation: every level's bucket in
// one call, each with its own marker.
func (s *redisStore) settlePath(ctx context.Context, rv *Reservation, final int64, marker time.Duration) (bool, error) {
	l, ps := s.l, rv.path
	delta := final - rv.n
	members := make([]*batch.Member[*settleCall, bool], len(ps.plans))
	for i, p := range ps.plans {
		rkey := ps.rkeys[i]
		members[i] = &batch.Member[*settleCall, bool]{Req: &settleCall{keys: [2]string{rkey, markerKey(rkey, l.prefix, p.fp, rv.id)}, delta: delta, marker: marker.Milliseconds(), plan: p}}
	}
	nd := s.node(ctx, ps.rkeys[0])
	var vals []int64
	routed, err := l.onNode(ctx, nd, l.now(), OpSettle, ps.rkeys[0], func() (time.Duration, error) {
		if len(members) == 1 {
			// settle.lua's lone form replies with one integer.
			start := time.Now()
			rctx, cancel := ctx, context.CancelFunc(func() {})
			if l.timeout > 0 {
				rctx, cancel = context.WithTimeout(ctx, l.timeout)
			}
			defer cancel()
			applied, err := settleOne(rctx, s.rdb, members[0].Req)
			vals = []int64{0}
			if applied {
				vals[0] = 1
			}
			return time.Since(start), err
		}
		keys, args := settleArgs(members)
		var took time.Duration
		var err error
		vals, took, err = s.runOp(ctx, nd, &op{script: settleScript, keys: keys, args: args}, l.timeout)
		return took, err
	})
	if !routed || err != nil {
		return false, s.unrouted(ctx, nd, l.now(), routed, err, false)
	}
	applied := false
	for _, v := range vals {
		switch v {
		case 1:
			applied = true
		case 0:
		default:
			return applied, &noAnswer{node: nd.brk.node, cause: errKeyFailed}
		}
	}
	return applied, nil
}

// release gives ls's slot back in Redis. It returns ErrLeaseLost when the
// slot had expired there before.
func (s *redisStore) release(ctx context.Context, ls *Lease) error {
	l, c := s.l, ls.c
	l.keeper().remove(ls)
	nd := s.node(ctx, ls.rkey)
	var vals []int64
	routed, cerr := l.onNode(ctx, nd, l.now(), OpRelease, ls.rkey, func() (time.Duration, error) {
		o := op{script: releaseScript, keys: []string{ls.rkey}, args: []any{c.lease.Milliseconds(), ls.id}}
		var took time.Duration
		var err error
		vals, took, err = s.runOp(ctx, nd, &o, l.timeout)
		if err == nil && len(vals) != 2 {
			err = fmt.Errorf("%w %v from the release script", errBadReply, vals)
		}
		if err == nil {
			l.foreignLease(ls.rkey, vals[1])
		}
		return took, err
	})
	switch {
	case !routed || cerr != nil:
		return s.unrouted(ctx, nd, l.now(), routed, cerr, false)
	case vals[0] == 0:
		return ErrLeaseLost
	}
	return nil
}
