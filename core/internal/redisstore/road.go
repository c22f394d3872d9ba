package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/internal/model"
	"github.com/sluicehq/sluice/core/internal/pause"
)

// This file is the one road every store operation takes through a node's
// breaker: [Store.onNode] routes the call, runs it, reports it to the
// observer with its kind, and judges its outcome once, for every kind of
// operation (decisions, peeks, settlements, acquisitions, releases,
// renewals, resets, heartbeats). What it judges:
//
//	outcome                            breaker          caller gets
//	---------------------------------  ---------------  ---------------------------------
//	an answer                          success          the answer
//	the caller's own context ended     probe abandoned  its context's error
//	a fault of the key (WRONGTYPE, a   success: the     the error, decided under the
//	  script error, a malformed reply)   node answered  failure policy; logged per key
//	a timeout overlapping a pause of   nothing          the error, decided under the
//	  this process (see package pause)                  failure policy
//	a fault of the node (timeout,      failure          the error, decided under the
//	  connection, LOADING, READONLY,                    failure policy
//	  OOM, CLUSTERDOWN, ...)
//
// While a node's breaker is open, calls are decided without it, except the
// lease keeper's renewals: no caller waits on them, so they are sent all
// the same, and their outcome leaves the breaker as it is (see aside).

// Operation kinds, as [Call.Op] reports them: core's Op constants,
// which a test holds equal.
const (
	OpDecide      = "decide"       // a decision or a reservation (Allow, Wait, Reserve)
	OpPeek        = "peek"         // Peek: a decision of cost 0 that writes nothing
	OpSettle      = "settle"       // a reservation's settlement
	OpAcquire     = "acquire"      // a concurrency slot taken
	OpRelease     = "release"      // a concurrency slot given back
	OpRenew       = "renew"        // a concurrency lease renewed by the lease keeper
	OpReset       = "reset"        // Reset: a key's state deleted
	OpLock        = "lock"         // Lock: a key locked for a time
	OpHeartbeat   = "heartbeat"    // the fleet heartbeat (WithFleet)
	OpPath        = "path"         // a path of keys decided as one (PathRule)
	OpOverrides   = "overrides"    // an overrides set read or changed (package overrides)
	OpLease       = "lease"        // a token lease taken (with the request that asked, if any)
	OpLeaseReturn = "lease_return" // a token lease's unspent tokens given back
	OpTop         = "top"          // top talkers flushed to a window, or read (WithTopTalkers)
	OpThreshold   = "threshold"    // a key's warning marker set, on a crossing of a warning threshold
)

// fault says whose failure a store error is.
type fault int8

const (
	faultNode  fault = iota // the node's: charged to its breaker
	faultKey                // the key's own: the node answered
	faultPause              // a timeout while this process was paused: nobody's
)

// errBadReply marks a reply the library cannot decode: a fault of the key
// (its stored value is not one the scripts write), not of the node.
var errBadReply = errors.New("core: unexpected script reply")

// excuseFor, in microseconds, is how long a node's timeouts may be
// excused by pauses of this process with no answer between them before
// they are charged all the same: a process that is paused all the time
// must still notice a node that never answers.
const excuseFor = 2_000_000

// onNode runs one operation of kind kind on node nd at now (the limiter's
// clock) through its breaker, with run doing the I/O under budget (see
// sendFunc) and returning its I/O time. routed is false when the breaker
// kept the call from the node: the caller then decides under the failure
// policy with no cause. With routed true, err is nil for an answer, the
// caller's context error when the caller gave up (return it), or the
// store's error (decide under the failure policy, or report it); see the
// table above.
//
// One call spends at most one budget from the moment it was asked (its
// first send's, counted from that send): a send again shares what is left
// of it (see again).
func (s *Store) onNode(ctx context.Context, nd *node, now int64, kind, key string, run sendFunc) (routed bool, err error) {
	r, asked := s.depart(nd, now)
	if r == viaLocal {
		return s.offRoad(ctx, nd, kind, key, run)
	}
	took, err := run(s.cfg.Budget)
	if s.quiet(nd, r, err) {
		return true, nil
	}
	return s.sent(ctx, nd, r, now, kind, key, asked, took, err, run)
}

// depart is the start of every call on nd at now (see onNode): its
// route and, unless that is viaLocal, the instant it is asked, with the
// pause detector watching. Store.Decide runs onNode's steps itself, with
// its send called directly and these three lines written in (a closure's
// call and each frame cost a lone decision code lines from cold;
// clientcost -cold): quiet is the step both share.
func (s *Store) depart(nd *node, now int64) (route, time.Time) {
	r := nd.brk.route(now)
	if r == viaLocal {
		return r, time.Time{}
	}
	pause.Watch()
	return r, time.Now()
}

// quiet reports whether a call's first send under route r, which ended
// with err, needs nothing more: an answer on a closed breaker with
// nothing to record and nobody to tell, which sent would do nothing
// with. (The rest is out of line: here, its code sat between the steps
// every call takes; clientcost -cold.)
func (s *Store) quiet(nd *node, r route, err error) bool {
	brk := nd.brk
	return err == nil && r == viaStore && s.up.Obs == nil && brk.fails.Load() == 0 && brk.excused.Load() == 0 && nd.policy.Load()
}

// offRoad is onNode for a call routed to the fallback (viaLocal): only
// the lease keeper's renewals are sent, aside.
func (s *Store) offRoad(ctx context.Context, nd *node, kind, key string, run sendFunc) (bool, error) {
	if kind != OpRenew {
		return false, nil
	}
	return true, s.aside(ctx, nd, kind, key, run)
}

// sent is the rest of onNode, once the call's first send under route r,
// asked at asked, took took and ended with err: the observer told, the
// call sent again if worth it, and its outcome counted on the node's
// breaker.
func (s *Store) sent(ctx context.Context, nd *node, r route, now int64, kind, key string, asked time.Time, took time.Duration, err error, run sendFunc) (bool, error) {
	brk := nd.brk
	f := s.judged(ctx, brk, kind, took, err)
	if err != nil && again(kind, f, err) {
		if left := s.cfg.Budget - time.Since(asked); left >= s.cfg.Budget/minResend && callerGone(ctx) == nil {
			// Sent once more under what is left of the budget. A
			// timeout of that send proves nothing of the node (it had
			// less than a budget): the call is judged by its first
			// send.
			took, err2 := run(left)
			f2 := s.judged(ctx, brk, kind, took, err2)
			if err2 == nil || Reason(err2) != ReasonTimeout {
				err, f = err2, f2
			}
		}
	}
	if err == nil {
		if brk.excused.Load() != 0 {
			brk.excused.Store(0)
		}
		if brk.success(r, now) {
			s.recovered(brk, now, "")
		}
		if !nd.policy.Load() {
			s.readPolicy(nd)
		}
		return true, nil
	}
	if cerr := callerGone(ctx); cerr != nil {
		brk.abandon(r, now)
		return true, cerr
	}
	switch f {
	case faultKey:
		if brk.success(r, now) {
			s.recovered(brk, now, "")
		}
		rctx, cancel := s.within(ctx, asked)
		if !s.replaceForeign(rctx, nd, key, kind, err) {
			s.keyFailed(nd, key, kind, err)
		}
		cancel()
		return true, err
	case faultPause:
		first := brk.excused.Load()
		if first == 0 {
			brk.excused.CompareAndSwap(0, now)
			first = now
		}
		if now-first < excuseFor {
			brk.abandon(r, now)
			return true, fmt.Errorf("%w: %w", errPaused, err)
		}
	}
	s.chargeNode(nd, r, now, key, err)
	return true, err
}

// sendFunc sends one call's I/O under budget and returns how long the
// I/O took. A budget below the store's (what is left of a call's budget
// after its first send, see onNode) is sent alone, not batched: a batch's
// I/O runs under a whole budget of its own. Background calls that carry
// their own deadline (the lease keeper's renewals) may ignore it.
type sendFunc func(budget time.Duration) (time.Duration, error)

// minResend: a call is sent again only with at least 1/minResend of the
// budget left (see again). A send with less would rarely be answered in
// time, and its timeout would tell nothing.
const minResend = 4

// again reports whether a call of kind kind whose first send ended with
// err, judged f, is worth sending once more within its budget: after a
// timeout that overlapped a pause of this process (the answer was lost to
// the pause, not to the node), rather than decide without the store; and
// an acquisition after any timeout (Redis may have given the slot: asked
// again by the same lease id, it takes no second one), rather than let the
// fallback add one beside it. Every kind may be sent again: settlements,
// acquisitions (by their lease id), releases and resets are idempotent; a
// decision sent again may charge its key twice, which errs toward denying,
// never toward admitting. A timeout normally spends the whole budget, so
// this is for a timeout that came early (a client's read timeout shorter
// than the budget); otherwise the call is decided under the failure
// policy, and a pause's timeout is still nobody's.
func again(kind string, f fault, err error) bool {
	switch {
	case err == nil || f == faultKey:
		return false
	case f == faultPause:
		return true
	}
	return kind == OpAcquire && Reason(err) == ReasonTimeout
}

// within returns ctx ending by the budget of a call asked at asked, for
// what the call sends besides its own operation (see replaceForeign): a
// send it outlives counts as given up, not as the node's failure.
func (s *Store) within(ctx context.Context, asked time.Time) (context.Context, context.CancelFunc) {
	if s.cfg.Budget <= 0 {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, asked.Add(s.cfg.Budget))
}

// sentAlone reports whether a send under budget goes alone rather than
// batched (see sendFunc).
func (s *Store) sentAlone(budget time.Duration) bool { return budget < s.cfg.Budget }

// judged judges the outcome of one call of kind kind, whose I/O took took
// and ended with err (nil for an answer), and reports it to the observer
// with that judgement. A call whose caller gave up is not reported (the
// store said nothing), and its fault is faultNode, which onNode does not
// use for it.
func (s *Store) judged(ctx context.Context, brk *breaker, kind string, took time.Duration, err error) fault {
	f := faultNode
	if err != nil {
		if callerGone(ctx) != nil {
			return f
		}
		f = s.faultOf(err, took)
	}
	if s.up.Obs != nil {
		s.up.Obs.ObserveStore(Call{Node: brk.node, Op: kind, Latency: took, Err: err, Paused: f == faultPause})
	}
	return f
}

// aside runs a background operation of kind kind (the lease keeper's
// renewals) on node nd while its breaker is open. No caller waits on it,
// so the breaker's reason to keep calls away (a request's budget) does not
// apply, and holders must re-assert their leases as soon as a restarted
// node answers: within its grace period (see acquire.lua), not after the
// probes of other requests have closed the breaker. Its outcome is
// observed but leaves the breaker as it is: requests' probes alone decide
// when the node is back.
func (s *Store) aside(ctx context.Context, nd *node, kind, key string, run sendFunc) error {
	took, err := run(s.cfg.Budget)
	if s.up.Obs != nil && (err == nil || callerGone(ctx) == nil) {
		s.up.Obs.ObserveStore(Call{Node: nd.brk.node, Op: kind, Latency: took, Err: err})
	}
	if err != nil && callerGone(ctx) == nil && KeyFault(err) {
		if !s.replaceForeign(ctx, nd, key, kind, err) {
			s.keyFailed(nd, key, kind, err)
		}
	}
	return err
}

// chargeNode charges a failure of the call sent at now (routed r) on key
// to nd's breaker.
func (s *Store) chargeNode(nd *node, r route, now int64, key string, err error) {
	brk := nd.brk
	s.failed()
	if brk.failedKey.Load() == nil || brk.isOpen() {
		k := key
		brk.failedKey.Store(&k)
	}
	if end := s.cfg.Now(); brk.failure(r, now, end) {
		s.degrade(brk, end, err)
	}
	s.rewarm(nd)
}

// faultOf judges err, an error of a call whose I/O took took and has just
// ended.
func (s *Store) faultOf(err error, took time.Duration) fault {
	if KeyFault(err) {
		return faultKey
	}
	if Reason(err) != ReasonTimeout {
		return faultNode
	}
	end := pause.Now()
	if pause.Overlaps(end-int64(took), end) || (s.cfg.Budget > 0 && took-s.cfg.Budget > pause.Late) {
		// A pause overlapped the call, or its deadline was noticed
		// late: this process was not running when it fired.
		return faultPause
	}
	return faultNode
}

// errPaused marks a store call that timed out while this process was
// paused (see model.ErrPaused).
var errPaused = model.ErrPaused

// keyLogs bounds the keys whose failures are logged, so that a flood of
// bad keys cannot flood the log.
const keyLogs = 64

// keyFailed logs, once per stored key (up to keyLogs keys), that a call
// on it failed for a reason of its own.
func (s *Store) keyFailed(nd *node, rkey, kind string, err error) {
	if s.keyLogCount.Load() >= keyLogs {
		return
	}
	if _, said := s.keyLogSaid.LoadOrStore(rkey, struct{}{}); said {
		return
	}
	if s.keyLogCount.Add(1) == keyLogs {
		s.up.Log().Warn("sluice: further keys whose own store calls fail are not logged", "limit", keyLogs)
	}
	s.up.Log().Warn("sluice: a store call failed for a reason of this key alone; it is decided under the failure policy, other keys are not affected",
		"node", nd.brk.node, "key", rkey, "op", kind, "error", err, "reason", Reason(err))
}

// keyLog is what keyFailed remembers.
type keyLog struct {
	keyLogSaid  sync.Map // stored key -> struct{}
	keyLogCount atomic.Int32
	notForeign  sync.Map // stored key -> struct{}: its fault is not a value of another type (see replaceForeign)
	notForeignN atomic.Int32
}

// sendOp sends o, an operation of kind kind that no failure policy governs
// (the fleet heartbeat: it must go on while a breaker is open, or the
// fleet would lose count of a replica deciding locally), to the node of
// its first key, and reports it to the observer. It feeds no breaker. It
// is sent alone, not batched, under ctx's deadline as its budget (the
// heartbeat's own, a heartbeat): a batch's I/O is bounded by the
// decisions' budget, which a Redis slower than that would never meet, and
// the fleet would stop counting while decisions go to the fallback.
func (s *Store) sendOp(ctx context.Context, kind string, o *op) ([]int64, error) {
	return s.sendScriptInts(ctx, kind, o.script, o.keys, o.args...)
}
