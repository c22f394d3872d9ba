package core

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core/internal/batch"
)

// This file is what the engine asks of the Redis store (see store): each
// question is named and routed to the node that owns its key, sent on the
// road (see redisStore.onNode), and its outcome turned into the store's
// answer, or a *noAnswer. What an answer entails on Redis alone (nodes
// retired after a failover) is done here; what it entails for the engine
// (the fallback kept warm, the deny cache, the fleet's heartbeat) is the
// engine's, once it has the answer.

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
		s.stillDown(nd.brk, now)
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
	c.rkey = s.rkey(c.plan.fp, c.key)
	c.keys[0] = c.rkey
	nd := s.node(ctx, c.rkey)
	var d decision
	routed, err := s.onNode(ctx, nd, c.now, kind, c.rkey, func() (time.Duration, error) {
		var took time.Duration
		var err error
		d, took, err = s.submit(ctx, nd, &c, s.cfg.budget)
		return took, err
	})
	if !routed || err != nil {
		return decision{}, s.unrouted(ctx, nd, c.now, routed, err, kind == OpDecide)
	}
	s.maybeSweep(ctx, c.now)
	return d, nil
}

func (s *redisStore) decidePath(ctx context.Context, q *pathAsk) (decision, int, error) {
	rkeys := make([]string, len(q.plans))
	root := q.keys[0]
	args := make([]any, 1, 1+len(q.plans)*12)
	args[0] = strconv.Itoa(len(q.plans))
	for i, p := range q.plans {
		rkeys[i] = redisKeyFrom(s.cfg.prefix, p.fp, root, q.keys[i], s.cfg.slotKey)
		c := call{plan: p, cost: q.cost, penalty: q.penalty, now: q.now}
		args = c.appendGroup(args)
	}
	pc := &pathCall{rkeys: rkeys, args: args, plans: q.plans}
	nd := s.node(ctx, rkeys[0])
	var ans pathAnswer
	routed, err := s.onNode(ctx, nd, q.now, OpPath, rkeys[0], func() (time.Duration, error) {
		var took time.Duration
		var err error
		ans, took, err = s.submitPath(ctx, nd, pc, s.cfg.budget)
		return took, err
	})
	if !routed || err != nil {
		return decision{}, 0, s.unrouted(ctx, nd, q.now, routed, err, true)
	}
	if ans.foreign > 0 {
		s.foreignLevel(nd, rkeys[ans.foreign-1], q.names[ans.foreign-1])
	}
	s.maybeSweep(ctx, q.now)
	return ans.d, ans.lv, nil
}

func (s *redisStore) reset(ctx context.Context, p *plan, key string) error {
	rkey := s.rkey(p.fp, key)
	nd := s.node(ctx, rkey)
	now := s.cfg.now()
	routed, err := s.onNode(ctx, nd, now, OpReset, rkey, func() (time.Duration, error) {
		_, took, err := s.runOp(ctx, nd, &op{script: resetScript, keys: []string{rkey}}, s.cfg.budget)
		return took, err
	})
	if !routed || err != nil {
		return s.unrouted(ctx, nd, now, routed, err, false)
	}
	return nil
}

func (s *redisStore) inProcess() bool { return false }

// acquire takes a slot of key in Redis. A slot Redis may hold though
// nobody heard it was given (the answer was lost to a timeout, or the
// caller gave up after the script was sent) comes back as lost, for the
// engine's lease keeper to give back.
func (s *redisStore) acquire(ctx context.Context, a slotAsk) (sl slot, lost *lostSlot, _ error) {
	rkey := s.rkey(a.fp, a.key)
	now := s.cfg.now()
	nd := s.node(ctx, rkey)
	id := newID()
	var vals []int64
	ekey := epochKey(rkey, s.cfg.prefix)
	o := op{script: acquireScript, keys: []string{rkey, ekey}, args: s.acquireArgs(nd, a, id, ekey)}
	send := func() (time.Duration, error) {
		var took time.Duration
		var err error
		vals, took, err = s.runOp(ctx, nd, &o, s.cfg.budget)
		if err == nil && (len(vals) != 9 || vals[0] < 0 || vals[0] > 1 || vals[1] < 0) {
			err = fmt.Errorf("%w %v from the concurrency script", errBadReply, vals)
		}
		if err == nil {
			s.foreignLease(rkey, vals[2])
			if vals[3] == -1 { // blind: the tag's epoch (see acquire.lua)
				s.seen.sawEpoch(ekey, vals[4])
			} else {
				s.seen.saw(nd, serverSeen{lastsave: vals[3], run: vals[4], restart: vals[5], replid: vals[7], myid: vals[8]}, vals[6] == 1)
			}
		}
		return took, err
	}
	routed, err := s.onNode(ctx, nd, now, OpAcquire, rkey, send)
	if routed && err != nil && ErrorReason(err) == ReasonTimeout && callerGone(ctx) == nil {
		// The answer was lost to a stall of Redis, and Redis may have
		// given the slot: ask once more with the same id, which takes no
		// second slot, rather than let the fallback add one beside it.
		// (onNode itself asks again after a pause of this process.)
		routed, err = s.onNode(ctx, nd, s.cfg.now(), OpAcquire, rkey, send)
	}
	if routed && err != nil && (ErrorReason(err) == ReasonTimeout || callerGone(ctx) != nil) {
		// Redis may hold the slot though nobody heard it was given:
		// the keeper gives it back, or it would keep one of Max for a
		// whole lease after a blip.
		lost = &lostSlot{rkey: rkey, id: id}
	}
	if !routed || err != nil {
		return slot{}, lost, s.unrouted(ctx, nd, now, routed, err, true)
	}
	sl = slot{acquired: vals[0] == 1, inFlight: int(vals[1])}
	if sl.acquired {
		sl.rkey, sl.id = rkey, id
	}
	return sl, nil, nil
}

// settle applies a, a settlement of a reservation Redis admitted, by one
// call of settle.lua on the node of its key (a path's: of its root), and
// reports whether it was applied (false: its marker says it had been).
func (s *redisStore) settle(ctx context.Context, a settleAsk) (bool, error) {
	if a.path {
		return s.settlePath(ctx, a)
	}
	p := a.plans[0]
	rkey := s.rkey(p.fp, a.keys[0])
	sc := &settleCall{keys: [2]string{rkey, markerKey(rkey, s.cfg.prefix, p.fp, a.id)}, delta: a.delta, marker: a.marker.Milliseconds(), plan: p, args: settleLimitArgs(p, a.now, a.now-a.at)}
	nd := s.node(ctx, rkey)
	var applied bool
	routed, err := s.onNode(ctx, nd, a.now, OpSettle, rkey, func() (time.Duration, error) {
		start := time.Now()
		var err error
		switch {
		case s.detached:
			applied, err = runApart(ctx, s.cfg.budget, func(ctx context.Context) (bool, error) { return settleOne(ctx, s.rdb, sc) })
		case nd.settle != nil:
			var took time.Duration
			applied, took, err = nd.settle.Do(ctx, sc)
			return took, err
		default:
			rctx, cancel := ctx, context.CancelFunc(func() {})
			if s.cfg.budget > 0 {
				rctx, cancel = context.WithTimeout(ctx, s.cfg.budget)
			}
			applied, err = settleOne(rctx, s.rdb, sc)
			cancel()
		}
		return time.Since(start), err
	})
	if !routed || err != nil {
		return false, s.unrouted(ctx, nd, s.cfg.now(), routed, err, false)
	}
	return applied, nil
}

// settlePath is settle for a path's reservation: every level's bucket in
// one call, each with its own marker.
func (s *redisStore) settlePath(ctx context.Context, a settleAsk) (bool, error) {
	members := make([]*batch.Member[*settleCall, bool], len(a.plans))
	var root string
	for i, p := range a.plans {
		rkey := redisKeyFrom(s.cfg.prefix, p.fp, a.keys[0], a.keys[i], s.cfg.slotKey)
		if i == 0 {
			root = rkey
		}
		members[i] = &batch.Member[*settleCall, bool]{Req: &settleCall{keys: [2]string{rkey, markerKey(rkey, s.cfg.prefix, p.fp, a.id)}, delta: a.delta, marker: a.marker.Milliseconds(), plan: p, args: settleLimitArgs(p, a.now, a.now-a.at)}}
	}
	nd := s.node(ctx, root)
	var vals []int64
	routed, err := s.onNode(ctx, nd, a.now, OpSettle, root, func() (time.Duration, error) {
		if len(members) == 1 {
			// settle.lua's lone form replies with one integer.
			start := time.Now()
			rctx, cancel := ctx, context.CancelFunc(func() {})
			if s.cfg.budget > 0 {
				rctx, cancel = context.WithTimeout(ctx, s.cfg.budget)
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
		vals, took, err = s.runOp(ctx, nd, &op{script: settleScript, keys: keys, args: args}, s.cfg.budget)
		return took, err
	})
	if !routed || err != nil {
		return false, s.unrouted(ctx, nd, s.cfg.now(), routed, err, false)
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
func (s *redisStore) release(ctx context.Context, r slotRef) error {
	nd := s.node(ctx, r.rkey)
	var vals []int64
	routed, cerr := s.onNode(ctx, nd, s.cfg.now(), OpRelease, r.rkey, func() (time.Duration, error) {
		o := op{script: releaseScript, keys: []string{r.rkey}, args: []any{r.lease.Milliseconds(), r.id}}
		var took time.Duration
		var err error
		vals, took, err = s.runOp(ctx, nd, &o, s.cfg.budget)
		if err == nil && len(vals) != 2 {
			err = fmt.Errorf("%w %v from the release script", errBadReply, vals)
		}
		if err == nil {
			s.foreignLease(r.rkey, vals[1])
		}
		return took, err
	})
	switch {
	case !routed || cerr != nil:
		return s.unrouted(ctx, nd, s.cfg.now(), routed, cerr, false)
	case vals[0] == 0:
		return ErrLeaseLost
	}
	return nil
}

// acquireArgs returns acquire.lua's arguments for a, under lease id, on
// node nd: what the store knows of nd's server, and of the epoch of the
// key's tag (epoch key ekey).
func (s *redisStore) acquireArgs(nd *node, a slotAsk, id, ekey string) []any {
	seen := s.seen.server(nd)
	args := []any{a.max, a.lease.Milliseconds(), id, seen.lastsave, seen.run, seen.restart, int64(-1), s.seen.epoch(ekey), newID()}
	if s.reload != nil { // a Cluster (see acquire.lua)
		args[6] = seen.myid
	}
	if seen.run == 0 { // first contact: the script compares histories
		args = s.seen.histories(nd, args)
	}
	return args
}

// renewal is one call of the lease keeper's round (see renew): a slot's
// renewal, or with give, the give back of a slot nobody heard was given.
// The store sets its outcome: the reply, or the error, and whether it was
// sent at all.
type renewal struct {
	rkey, id string
	max      int           // the cap's Max
	lease    time.Duration // the cap's lease
	give     bool          // give the slot back (release.lua), not renew it
	vals     []int64       // the reply: renew.lua's or release.lua's
	err      error
	sent     bool
}

// renew sends a round of the lease keeper's calls: one pipeline per node,
// on the road even while the node's breaker is open (see aside), so that
// a restarted node hears from its holders within its grace period. A
// node's failure is charged once for its round.
func (s *redisStore) renew(ctx context.Context, round []*renewal) {
	byNode := map[*node][]*renewal{}
	var order []*node
	for _, r := range round {
		nd := s.node(ctx, r.rkey)
		if _, ok := byNode[nd]; !ok {
			order = append(order, nd)
		}
		byNode[nd] = append(byNode[nd], r)
	}
	for _, nd := range order {
		rs := byNode[nd]
		ops := make([]*op, len(rs))
		for i, r := range rs {
			if r.give {
				ops[i] = &op{script: releaseScript, keys: []string{r.rkey}, args: []any{r.lease.Milliseconds(), r.id}}
			} else {
				ops[i] = &op{script: renewScript, keys: []string{r.rkey, epochKey(r.rkey, s.cfg.prefix)}, args: []any{r.max, r.lease.Milliseconds(), r.id, newID()}}
			}
		}
		_, _ = s.onNode(ctx, nd, s.cfg.now(), OpRenew, rs[0].rkey, func() (time.Duration, error) {
			start := time.Now()
			replies := s.runOps(ctx, nd, ops)
			var err error
			for i, m := range replies {
				rs[i].vals, rs[i].err, rs[i].sent = m.Res, m.Err, true
				if m.Err != nil && !keyFault(m.Err) && err == nil {
					err = m.Err // the node's failure, charged once
				}
			}
			return time.Since(start), err
		})
		for _, r := range rs {
			if r.err == nil && len(r.vals) == 2 {
				s.foreignLease(r.rkey, r.vals[1])
			}
		}
	}
}

// foreignLease logs, once per store, that the lease set rkey held a value
// of another type, which the script deleted (flag 1).
func (s *redisStore) foreignLease(rkey string, flag int64) {
	if flag != 1 || !s.seen.foreignLogged.CompareAndSwap(false, true) {
		return
	}
	s.up.log().Warn("sluice: a concurrency cap's key held a value of another type; it was deleted and the cap counts from zero. Another program writes under the limiter's prefix (core.WithPrefix)",
		"key", rkey)
}

// leaseCall is a token lease asked of the store (see hotlease.go): a take
// (with the request of cost that asked, 0 for none), or with back a give
// back of carry tokens.
type leaseCall struct {
	plan    *plan
	key     string
	id      string // the lease's id in the key's holds
	back    bool
	cost    int64
	want    int64
	carry   int64 // tokens in hand carried into the take; negative: given back first
	penalty int64 // microseconds
	now     int64
}

// leaseAnswer is a token lease call's answer: the request's decision, the
// tokens granted, the lease's life and the tokens given back.
type leaseAnswer struct {
	d                      decision
	granted, life, refunds int64
}

// lease sends lc on the road as one call of lease.lua (kind OpLease, or
// OpLeaseReturn for a give back) to the node of its key. A take that
// carries a request counts as decided without the store when it is not
// answered, as a decision does.
func (s *redisStore) lease(ctx context.Context, lc *leaseCall) (leaseAnswer, *noAnswer) {
	p := lc.plan
	rkey := s.rkey(p.fp, lc.key)
	mode, kind := "1", OpLease
	if lc.back {
		mode, kind = "2", OpLeaseReturn
	}
	args := make([]any, 0, 8+len(p.args))
	args = append(args, mode, lc.id, strconv.FormatInt(lc.cost, 10), strconv.FormatInt(lc.want, 10), strconv.FormatInt(lc.carry, 10),
		strconv.FormatInt(p.lease.life, 10), strconv.FormatInt(p.lease.bound, 10), strconv.FormatInt(max(0, lc.penalty), 10))
	args = append(args, p.args...)
	o := &op{script: leaseScript, keys: []string{rkey, holdsKey(rkey, s.cfg.prefix, p.fp)}, args: args}
	nd := s.node(ctx, rkey)
	var vals []int64
	routed, err := s.onNode(ctx, nd, lc.now, kind, rkey, func() (time.Duration, error) {
		var took time.Duration
		var err error
		vals, took, err = s.runOp(ctx, nd, o, s.cfg.budget)
		return took, err
	})
	var a leaseAnswer
	if routed && err == nil {
		if !lc.back {
			a, err = parseLease(vals, p)
		} else if len(vals) != 1 || vals[0] < 0 || vals[0] > lc.carry {
			err = fmt.Errorf("%w %v to a give back of %d tokens", errBadReply, vals, lc.carry)
		} else {
			a.refunds = vals[0]
		}
		if err == nil {
			return a, nil
		}
	}
	return leaseAnswer{}, s.unrouted(ctx, nd, lc.now, routed, err, !lc.back && lc.cost > 0)
}

// parseLease decodes a take's reply: the request's decision, the tokens
// granted, the lease's life and the tokens given back first.
func parseLease(vals []int64, p *plan) (leaseAnswer, error) {
	var a leaseAnswer
	if len(vals) != replyWidth+3 {
		return a, fmt.Errorf("%w of %d values to a lease, want %d", errBadReply, len(vals), replyWidth+3)
	}
	d, err := parseReply(vals[:replyWidth], p)
	if err != nil {
		return a, err
	}
	a.d, a.granted, a.life, a.refunds = d, vals[replyWidth], vals[replyWidth+1], vals[replyWidth+2]
	if a.granted < 0 || a.life < 0 || a.life > maxLeaseLife || a.refunds < 0 {
		return leaseAnswer{}, fmt.Errorf("%w: a lease of %d tokens for %d µs", errBadReply, a.granted, a.life)
	}
	return a, nil
}

// heartbeat announces member id in the fleet called name (see WithFleet), drops members
// silent for ttl, and returns how many remain. No failure policy governs
// it (see sendOp).
func (s *redisStore) heartbeat(ctx context.Context, name, id string, ttl time.Duration) (int64, error) {
	v, err := s.sendOp(ctx, OpHeartbeat, &op{script: fleetScript, keys: []string{s.fleetKey(name)}, args: []any{id, ttl.Milliseconds()}})
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("%w %v from the fleet script", errBadReply, v)
	}
	return v[0], nil
}

// leaveFleet removes member id from the fleet called name at once.
func (s *redisStore) leaveFleet(ctx context.Context, name, id string) error {
	_, err := s.sendOp(ctx, OpHeartbeat, &op{script: fleetLeaveScript, keys: []string{s.fleetKey(name)}, args: []any{id}})
	if err != nil {
		return fmt.Errorf("core: leaving fleet %s: %w", s.fleetKey(name), err)
	}
	return nil
}
