package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core/internal/batch"
	"github.com/sluicehq/sluice/core/internal/pause"
)

// This file is what the engine asks of the Redis store (see store): each
// question is named and routed to the node that owns its key, sent on the
// road (see Store.onNode), and its outcome turned into the store's
// answer, or a *noAnswer. What an answer entails on Redis alone (nodes
// retired after a failover) is done here; what it entails for the engine
// (the fallback kept warm, the deny cache, the fleet's heartbeat) is the
// engine's, once it has the answer.

// unrouted returns the store's error for a call on nd that the road
// routed (routed) and that ended with err, which is not nil unless routed
// is false. A question that would have decided a request (degrades)
// counts on nd's breaker as decided without it, and keeps the outage log
// going.
func (s *Store) unrouted(ctx context.Context, nd *node, now int64, routed bool, err error, degrades bool) *noAnswer {
	if cerr := callerGone(ctx); routed && cerr != nil {
		return &noAnswer{Node: nd.brk.node, Gone: cerr}
	}
	if degrades {
		nd.brk.degraded.Add(1)
		s.stillDown(nd.brk, now)
	}
	if !routed {
		err = nil
	}
	return &noAnswer{Node: nd.brk.node, Cause: err}
}

// Decide decides a request of cost on key under p at now; with cost 0, a
// peek (an operation of kind OpPeek that writes nothing). It sends the
// query to the node of its key and takes in the answer, or returns a
// *noAnswer. A lone decision's every frame, and every byte of code it
// runs, costs it code lines from cold (clientcost -cold): so this runs
// onNode's steps itself (depart's written in), with submit's lone send
// written in, and what a quiet answer does not need is out of line (decideRest).
func (s *Store) Decide(ctx context.Context, key string, p *plan, cost, maxWait, penalty, now int64) (d decision, na *noAnswer) {
	// Named first, so that the query is one literal: stores into an
	// object just made need no write barriers.
	rkey := s.RKey(p.FP, key)
	c := &Query{Key: key, RKey: rkey, Plan: p, Cost: cost, MaxWait: maxWait, Penalty: penalty, Now: now, keys: [1]string{rkey}}
	if cost > 0 && (p.Shadow != nil || p.Stepped) { // a peek's answer is the enforced limits'
		s.extend(c)
	}
	nd := s.node(ctx, rkey)
	// depart's step, written here (its frame cost a lone decision
	// code lines from cold).
	r := nd.brk.route(now)
	if r == viaLocal {
		// offRoad sends nothing for a decision (it is never a renewal).
		na = s.unrouted(ctx, nd, now, false, nil, cost > 0)
		return
	}
	pause.Watch()
	asked := time.Now()
	var took time.Duration
	var err error
	if s.lean && nd.batch != nil && c.plain() && enough(ctx, s.cfg.Budget) {
		// submit's lone send, for a plain decision on a lean store (see
		// Store.lean), written here: its frame cost a lone decision
		// code lines from cold. The slot is given back when Decide
		// returns.
		if !nd.batch.Alone() {
			took, err = batched(ctx, nd, c, &d)
		} else {
			// Its I/O time and budget are counted from asked, an
			// instant before (see submit).
			defer nd.batch.Done() // as in submit
			c.bctx = budgetCtx{Context: ctx, dl: asked.Add(s.cfg.Budget)}
			err = s.sendPlain(&c.bctx, nd, c, &d)
			took = time.Since(asked)
		}
	} else {
		took, err = s.submit(ctx, nd, c, s.cfg.Budget, &d)
	}
	if !s.quiet(nd, r, err) || c.quota != nil {
		na = s.decideRest(ctx, nd, c, r, asked, took, err, &d)
		return
	}
	s.maybeSweep(ctx, now)
	return
}

// decideRest is the rest of Decide for c, whose first send under route
// r, asked at asked, took took and ended with err, was not quiet or is a
// stepped limit's: onNode's last step (sent, with the send again built
// here), the store's error if the road gave no answer, and the quota
// entry told of one.
func (s *Store) decideRest(ctx context.Context, nd *node, c *Query, r route, asked time.Time, took time.Duration, err error, d *decision) *noAnswer {
	routed := true
	if !s.quiet(nd, r, err) {
		kind := OpDecide
		if c.Cost == 0 {
			kind = OpPeek
		}
		routed, err = s.sent(ctx, nd, r, c.Now, kind, c.RKey, asked, took, err, func(budget time.Duration) (time.Duration, error) {
			return s.submit(ctx, nd, c, budget, d)
		})
	}
	if !routed || err != nil {
		return s.unrouted(ctx, nd, c.Now, routed, err, c.Cost > 0)
	}
	if c.quota != nil {
		s.quotaAnswered(c, d)
	}
	s.maybeSweep(ctx, c.Now)
	return nil
}

// extend gives c, a decision, what its plan adds to a plain one: its
// shadow limits' decisions and, for a stepped limit, its quota entry.
// (This and quotaAnswered are out of Decide's line: there, their code sat
// between the steps every decision takes; clientcost -cold.)
func (s *Store) extend(c *Query) {
	if c.Plan.Shadow != nil {
		c.setShadows(func(fp string) string { return s.RKey(fp, c.Key) })
	}
	if c.Plan.Stepped {
		c.quota = s.quota.entry(c.RKey, epochKey(c.RKey, s.cfg.Prefix), c.Plan)
	}
}

// quotaAnswered takes in d, the answer to c, a decision of a stepped
// limit, in c's quota entry.
func (s *Store) quotaAnswered(c *Query, d *decision) {
	admitted := int64(0)
	if d.Allowed {
		admitted = c.Cost
	}
	s.quota.answered(c.RKey, c.quota, c.Plan, d.Epoch, admitted, c.Now)
}

// Peek is Decide at cost 0.
func (s *Store) Peek(ctx context.Context, key string, p *plan, now int64) (decision, *noAnswer) {
	return s.Decide(ctx, key, p, 0, 0, 0, now)
}

func (s *Store) DecidePath(ctx context.Context, q *pathAsk) (decision, int, error) {
	rkeys := make([]string, len(q.Plans))
	root := q.Keys[0]
	args := make([]any, 1, 1+len(q.Plans)*12)
	args[0] = strconv.Itoa(len(q.Plans))
	var quotas []*quotaEntry // each level's quota entry, when some level is stepped
	for i, p := range q.Plans {
		rkeys[i] = RedisKeyFrom(s.cfg.Prefix, p.FP, root, q.Keys[i], s.cfg.SlotKey)
		c := Query{Plan: p, Cost: q.Cost, Penalty: q.Penalty, Now: q.Now}
		args = c.AppendGroup(args)
		if p.Stepped && q.Cost > 0 {
			if quotas == nil {
				quotas = make([]*quotaEntry, len(q.Plans))
			}
			quotas[i] = s.quota.entry(rkeys[i], epochKey(rkeys[0], s.cfg.Prefix), p)
		}
	}
	pc := &PathQuery{RKeys: rkeys, Args: args, Plans: q.Plans}
	if quotas != nil {
		pc.Args, pc.quota = appendPathQuota(args, quotas), true
	}
	if q.Share != nil {
		parent, child := ShareKeys(rkeys, q.Share.Level)
		pc.RKeys = append(pc.RKeys, parent, child)
		pc.Args = AppendShare(pc.Args, q.Share)
	}
	if quotas != nil {
		pc.RKeys = append(pc.RKeys, epochKey(rkeys[0], s.cfg.Prefix))
	}
	nd := s.node(ctx, rkeys[0])
	var ans PathAnswer
	routed, err := s.onNode(ctx, nd, q.Now, OpPath, rkeys[0], func(budget time.Duration) (time.Duration, error) {
		var took time.Duration
		var err error
		ans, took, err = s.submitPath(ctx, nd, pc, budget)
		return took, err
	})
	if !routed || err != nil {
		return decision{}, 0, s.unrouted(ctx, nd, q.Now, routed, err, true)
	}
	if ans.Foreign > 0 {
		s.foreignLevel(nd, rkeys[ans.Foreign-1], q.Names[ans.Foreign-1])
	}
	for i, e := range quotas {
		if e != nil {
			admitted := int64(0)
			if ans.D.Allowed {
				admitted = q.Cost
			}
			s.quota.answered(rkeys[i], e, q.Plans[i], ans.Epoch, admitted, q.Now)
		}
	}
	s.maybeSweep(ctx, q.Now)
	return ans.D, ans.Level, nil
}

func (s *Store) Reset(ctx context.Context, p *plan, key string) error {
	rkey := s.RKey(p.FP, key)
	nd := s.node(ctx, rkey)
	now := s.cfg.Now()
	routed, err := s.onNode(ctx, nd, now, OpReset, rkey, func(budget time.Duration) (time.Duration, error) {
		_, took, err := s.runOp(ctx, nd, &op{script: ResetScript, keys: []string{rkey}}, budget)
		return took, err
	})
	if !routed || err != nil {
		return s.unrouted(ctx, nd, now, routed, err, false)
	}
	return nil
}

func (s *Store) InProcess() bool { return false }

// Acquire takes a slot of key in Redis. A slot Redis may hold though
// nobody heard it was given (the answer was lost to a timeout, or the
// caller gave up after the script was sent) comes back as lost, for the
// engine's lease keeper to give back.
func (s *Store) Acquire(ctx context.Context, a slotAsk) (sl slot, lost *lostSlot, _ error) {
	rkey := s.RKey(a.FP, a.Key)
	now := s.cfg.Now()
	nd := s.node(ctx, rkey)
	id := newID()
	var vals []int64
	ekey := epochKey(rkey, s.cfg.Prefix)
	o := op{script: acquireScript, keys: []string{rkey, ekey}, args: s.acquireArgs(nd, a, id, ekey)}
	send := func(budget time.Duration) (time.Duration, error) {
		var took time.Duration
		var err error
		vals, took, err = s.runOp(ctx, nd, &o, budget)
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
	// After a timeout, onNode asks once more with the same id within the
	// budget (see again).
	routed, err := s.onNode(ctx, nd, now, OpAcquire, rkey, send)
	if routed && err != nil && (Reason(err) == ReasonTimeout || callerGone(ctx) != nil) {
		// Redis may hold the slot though nobody heard it was given:
		// the keeper gives it back, or it would keep one of Max for a
		// whole lease after a blip.
		lost = &lostSlot{RKey: rkey, ID: id}
	}
	if !routed || err != nil {
		return slot{}, lost, s.unrouted(ctx, nd, now, routed, err, true)
	}
	sl = slot{Acquired: vals[0] == 1, InFlight: int(vals[1])}
	if sl.Acquired {
		sl.RKey, sl.ID = rkey, id
	}
	return sl, nil, nil
}

// Settle applies a, a settlement of a reservation Redis admitted, by one
// call of Settle.lua on the node of its key (a path's: of its root), and
// reports whether it was applied (false: its marker says it had been).
func (s *Store) Settle(ctx context.Context, a settleAsk) (bool, error) {
	if a.Path {
		return s.settlePath(ctx, a)
	}
	p := a.Plans[0]
	rkey := s.RKey(p.FP, a.Keys[0])
	sc := &SettleQuery{Keys: [2]string{rkey, MarkerKey(rkey, s.cfg.Prefix, p.FP, a.ID)}, Delta: a.Delta, Marker: a.Marker.Milliseconds(), Plan: p, args: settleLimitArgs(p, a.Now, a.Now-a.At)}
	nd := s.node(ctx, rkey)
	var applied bool
	routed, err := s.onNode(ctx, nd, a.Now, OpSettle, rkey, func(budget time.Duration) (time.Duration, error) {
		start := time.Now()
		var err error
		switch {
		case s.detached:
			applied, err = runApart(ctx, budget, func(ctx context.Context) (bool, error) { return settleOne(ctx, s.rdb, sc) })
		case nd.settle != nil && !s.sentAlone(budget):
			var took time.Duration
			applied, took, err = nd.settle.Do(ctx, sc)
			return took, err
		default:
			rctx, cancel := ctx, context.CancelFunc(func() {})
			if budget > 0 {
				rctx, cancel = context.WithTimeout(ctx, budget)
			}
			applied, err = settleOne(rctx, s.rdb, sc)
			cancel()
		}
		return time.Since(start), err
	})
	if !routed || err != nil {
		return false, s.unrouted(ctx, nd, s.cfg.Now(), routed, err, false)
	}
	if applied && p.Stepped {
		s.quota.settled(rkey, p, a.Delta, a.At)
	}
	return applied, nil
}

// settlePath is settle for a path's reservation: every level's bucket in
// one call, each with its own marker.
func (s *Store) settlePath(ctx context.Context, a settleAsk) (bool, error) {
	members := make([]*batch.Member[*SettleQuery, bool], len(a.Plans))
	var root string
	for i, p := range a.Plans {
		rkey := RedisKeyFrom(s.cfg.Prefix, p.FP, a.Keys[0], a.Keys[i], s.cfg.SlotKey)
		if i == 0 {
			root = rkey
		}
		members[i] = &batch.Member[*SettleQuery, bool]{Req: &SettleQuery{Keys: [2]string{rkey, MarkerKey(rkey, s.cfg.Prefix, p.FP, a.ID)}, Delta: a.Delta, Marker: a.Marker.Milliseconds(), Plan: p, args: settleLimitArgs(p, a.Now, a.Now-a.At)}}
	}
	nd := s.node(ctx, root)
	var vals []int64
	routed, err := s.onNode(ctx, nd, a.Now, OpSettle, root, func(budget time.Duration) (time.Duration, error) {
		if len(members) == 1 {
			// settle.lua's lone form replies with one integer.
			start := time.Now()
			rctx, cancel := ctx, context.CancelFunc(func() {})
			if budget > 0 {
				rctx, cancel = context.WithTimeout(ctx, budget)
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
		vals, took, err = s.runOp(ctx, nd, &op{script: SettleScript, keys: keys, args: args}, budget)
		return took, err
	})
	if !routed || err != nil {
		return false, s.unrouted(ctx, nd, s.cfg.Now(), routed, err, false)
	}
	applied := false
	for _, v := range vals {
		switch v {
		case 1:
			applied = true
		case 0:
		default:
			return applied, &noAnswer{Node: nd.brk.node, Cause: ErrKeyFailed}
		}
	}
	for i, m := range members {
		if i < len(vals) && vals[i] == 1 && a.Plans[i].Stepped {
			s.quota.settled(m.Req.Keys[0], a.Plans[i], a.Delta, a.At)
		}
	}
	return applied, nil
}

// Release gives ls's slot back in Redis. It returns errLeaseLost when the
// slot had expired there before.
func (s *Store) Release(ctx context.Context, r slotRef) error {
	nd := s.node(ctx, r.RKey)
	var vals []int64
	routed, cerr := s.onNode(ctx, nd, s.cfg.Now(), OpRelease, r.RKey, func(budget time.Duration) (time.Duration, error) {
		o := op{script: releaseScript, keys: []string{r.RKey}, args: []any{r.Lease.Milliseconds(), r.ID}}
		var took time.Duration
		var err error
		vals, took, err = s.runOp(ctx, nd, &o, budget)
		if err == nil && len(vals) != 2 {
			err = fmt.Errorf("%w %v from the release script", errBadReply, vals)
		}
		if err == nil {
			s.foreignLease(r.RKey, vals[1])
		}
		return took, err
	})
	switch {
	case !routed || cerr != nil:
		return s.unrouted(ctx, nd, s.cfg.Now(), routed, cerr, false)
	case vals[0] == 0:
		return errLeaseLost
	}
	return nil
}

// acquireArgs returns acquire.lua's arguments for a, under lease id, on
// node nd: what the store knows of nd's server, and of the epoch of the
// key's tag (epoch key ekey).
func (s *Store) acquireArgs(nd *node, a slotAsk, id, ekey string) []any {
	seen := s.seen.server(nd)
	args := []any{a.Max, a.Lease.Milliseconds(), id, seen.lastsave, seen.run, seen.restart, int64(-1), s.seen.epoch(ekey), newID()}
	if s.reload != nil { // a Cluster (see acquire.lua)
		args[6] = seen.myid
	}
	if seen.run == 0 { // first contact: the script compares histories
		args = s.seen.histories(nd, args)
	}
	return args
}

// Renew sends a round of the lease keeper's calls: one pipeline per node,
// on the road even while the node's breaker is open (see aside), so that
// a restarted node hears from its holders within its grace period. A
// node's failure is charged once for its round.
func (s *Store) Renew(ctx context.Context, round []*renewal) {
	byNode := map[*node][]*renewal{}
	var order []*node
	for _, r := range round {
		nd := s.node(ctx, r.RKey)
		if _, ok := byNode[nd]; !ok {
			order = append(order, nd)
		}
		byNode[nd] = append(byNode[nd], r)
	}
	for _, nd := range order {
		rs := byNode[nd]
		ops := make([]*op, len(rs))
		for i, r := range rs {
			if r.Give {
				ops[i] = &op{script: releaseScript, keys: []string{r.RKey}, args: []any{r.Lease.Milliseconds(), r.ID}}
			} else {
				ops[i] = &op{script: renewScript, keys: []string{r.RKey, epochKey(r.RKey, s.cfg.Prefix)}, args: []any{r.Max, r.Lease.Milliseconds(), r.ID, newID()}}
			}
		}
		// A round has its own deadline (ctx's), not a caller's budget.
		_, _ = s.onNode(ctx, nd, s.cfg.Now(), OpRenew, rs[0].RKey, func(time.Duration) (time.Duration, error) {
			start := time.Now()
			replies := s.runOps(ctx, nd, ops)
			var err error
			for i, m := range replies {
				rs[i].Vals, rs[i].Err, rs[i].Sent = m.Res, m.Err, true
				rs[i].KeyFault = m.Err != nil && KeyFault(m.Err)
				if m.Err != nil && !KeyFault(m.Err) && err == nil {
					err = m.Err // the node's failure, charged once
				}
			}
			return time.Since(start), err
		})
		for _, r := range rs {
			if r.Err == nil && len(r.Vals) == 2 {
				s.foreignLease(r.RKey, r.Vals[1])
			}
		}
	}
}

// foreignLease logs, once per store, that the lease set rkey held a value
// of another type, which the script deleted (flag 1).
func (s *Store) foreignLease(rkey string, flag int64) {
	if flag != 1 || !s.seen.foreignLogged.CompareAndSwap(false, true) {
		return
	}
	s.up.Log().Warn("sluice: a concurrency cap's key held a value of another type; it was deleted and the cap counts from zero. Another program writes under the limiter's prefix (core.WithPrefix)",
		"key", rkey)
}

// Lease sends lc on the road as one call of Lease.lua (kind OpLease, or
// OpLeaseReturn for a give back) to the node of its key. A take that
// carries a request counts as decided without the store when it is not
// answered, as a decision does.
func (s *Store) Lease(ctx context.Context, lc *leaseCall) (leaseAnswer, *noAnswer) {
	p := lc.Plan
	rkey := s.RKey(p.FP, lc.Key)
	mode, kind := "1", OpLease
	if lc.Back {
		mode, kind = "2", OpLeaseReturn
	}
	args := make([]any, 0, 8+len(p.Args))
	args = append(args, mode, lc.ID, strconv.FormatInt(lc.Cost, 10), strconv.FormatInt(lc.Want, 10), strconv.FormatInt(lc.Carry, 10),
		strconv.FormatInt(lc.Life, 10), strconv.FormatInt(lc.Bound, 10), strconv.FormatInt(max(0, lc.Penalty), 10))
	args = append(args, p.Args...)
	o := &op{script: LeaseScript, keys: []string{rkey, HoldsKey(rkey, s.cfg.Prefix, p.FP), EndsKey(rkey, s.cfg.Prefix, p.FP)}, args: args}
	nd := s.node(ctx, rkey)
	var vals []int64
	routed, err := s.onNode(ctx, nd, lc.Now, kind, rkey, func(budget time.Duration) (time.Duration, error) {
		var took time.Duration
		var err error
		vals, took, err = s.runOp(ctx, nd, o, budget)
		return took, err
	})
	var a leaseAnswer
	if routed && err == nil {
		if !lc.Back {
			a, err = parseLease(vals, p)
		} else if len(vals) != 1 || vals[0] < 0 || vals[0] > lc.Carry {
			err = fmt.Errorf("%w %v to a give back of %d tokens", errBadReply, vals, lc.Carry)
		} else {
			a.Refunds = vals[0]
		}
		if err == nil {
			return a, nil
		}
	}
	return leaseAnswer{}, s.unrouted(ctx, nd, lc.Now, routed, err, !lc.Back && lc.Cost > 0)
}

// parseLease decodes a take's reply: the request's decision, the tokens
// granted, the lease's life, the tokens given back first and Redis's clock.
func parseLease(vals []int64, p *plan) (leaseAnswer, error) {
	var a leaseAnswer
	if len(vals) != ReplyWidth+4 {
		return a, fmt.Errorf("%w of %d values to a lease, want %d", errBadReply, len(vals), ReplyWidth+4)
	}
	d, err := ParseReply(vals[:ReplyWidth], p)
	if err != nil {
		return a, err
	}
	a.Decision, a.Granted, a.Life, a.Refunds, a.At = d, vals[ReplyWidth], vals[ReplyWidth+1], vals[ReplyWidth+2], vals[ReplyWidth+3]
	if a.Granted < 0 || a.Life < 0 || a.Life > maxLeaseLife || a.Refunds < 0 {
		return leaseAnswer{}, fmt.Errorf("%w: a lease of %d tokens for %d µs", errBadReply, a.Granted, a.Life)
	}
	return a, nil
}

// Heartbeat announces member id in the fleet called name (see WithFleet), drops members
// silent for ttl, and returns how many remain. No failure policy governs
// it (see sendOp).
func (s *Store) Heartbeat(ctx context.Context, name, id string, ttl time.Duration) (int64, error) {
	v, err := s.sendOp(ctx, OpHeartbeat, &op{script: fleetScript, keys: []string{s.fleetKey(name)}, args: []any{id, ttl.Milliseconds()}})
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("%w %v from the fleet script", errBadReply, v)
	}
	return v[0], nil
}

// LeaveFleet removes member id from the fleet called name at once.
func (s *Store) LeaveFleet(ctx context.Context, name, id string) error {
	_, err := s.sendOp(ctx, OpHeartbeat, &op{script: fleetLeaveScript, keys: []string{s.fleetKey(name)}, args: []any{id}})
	if err != nil {
		return fmt.Errorf("core: leaving fleet %s: %w", s.fleetKey(name), err)
	}
	return nil
}

// Lock locks key's bucket under p for d microseconds from Redis's clock
// (lock.lua), unless a lock that ends later holds it, and returns how
// long, from Redis's clock, the key's lock lasts. now is the engine's
// clock when it asked, for the road.
func (s *Store) Lock(ctx context.Context, p *plan, key string, d, now int64) (int64, error) {
	rkey := s.RKey(p.FP, key)
	nd := s.node(ctx, rkey)
	full := strings.Repeat(" 0 0", len(p.Ticks))
	var left int64
	routed, err := s.onNode(ctx, nd, now, OpLock, rkey, func(budget time.Duration) (time.Duration, error) {
		vals, took, err := s.runOp(ctx, nd, &op{script: lockScript, keys: []string{rkey}, args: []any{d, full}}, budget)
		if err == nil && (len(vals) != 1 || vals[0] < 0) {
			err = fmt.Errorf("%w %v from the lock script", errBadReply, vals)
		}
		if err == nil {
			left = vals[0]
		}
		return took, err
	})
	if !routed || err != nil {
		return 0, s.unrouted(ctx, nd, now, routed, err, false)
	}
	return left, nil
}
