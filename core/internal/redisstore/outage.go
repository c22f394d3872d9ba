package redisstore

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// flapWindow, in microseconds, is how soon after a node's recovery a new
// outage counts as flapping, and how often flapping is summarised: a store
// failing 20–50% of calls logs a few lines per window, not one per outage.
// An outage not logged at its start is logged once it lasts this long.
const flapWindow = 10_000_000

// outageLog decides which of one node's outage transitions reach the log.
// An outage is logged when it starts and when it ends, unless it starts
// within flapWindow of the previous recovery: then it is counted, and the
// counts are logged at most once per flapWindow. Every transition still
// reaches the Observer.
type outageLog struct {
	logged atomic.Bool // the current outage's start was logged

	mu           sync.Mutex
	lastRecovery int64 // microsecond of the last recovery, 0 if none
	lastSummary  int64 // microsecond of the last summary, 0 if none
	flaps        int   // outages counted, not logged, since the last summary
	flapDegraded int64 // decisions those outages degraded
	lastErr      error // the error that opened the last outage counted
}

// degrade records the start of an outage of brk's node at now.
func (s *Store) degrade(brk *breaker, now int64, err error) {
	if !brk.outageStart.CompareAndSwap(0, now) {
		return
	}
	s.openNodes.Add(1)
	brk.degraded.Store(0)
	if s.up.Obs != nil {
		s.up.Obs.ObserveDegraded(Outage{Node: brk.node, Start: time.UnixMicro(now), Err: err})
	}
	g := &brk.log
	g.mu.Lock()
	if g.lastRecovery == 0 || now-g.lastRecovery >= flapWindow {
		g.logged.Store(true)
		g.mu.Unlock()
		s.logOutage(brk, err, 0)
		return
	}
	g.logged.Store(false)
	g.flaps++
	g.lastErr = err
	n, degraded, ok := g.summary(now)
	g.mu.Unlock()
	if ok {
		s.logFlapping(brk, n, degraded, err)
	}
}

// logFlapping logs a summary of the outages counted since the last one.
func (s *Store) logFlapping(brk *breaker, outages int, degraded int64, err error) {
	s.up.Log().Warn("sluice: store flapping: outages within 10s of a recovery are counted here, at most once per 10s",
		"node", brk.node, "outages", outages, "degraded_decisions", degraded, "error", err, "reason", Reason(err))
}

// summary returns the counts to log and resets them, if a summary is due at
// now. The caller holds g.mu.
func (g *outageLog) summary(now int64) (outages int, degraded int64, due bool) {
	if g.flaps == 0 || (g.lastSummary != 0 && now-g.lastSummary < flapWindow) {
		return 0, 0, false
	}
	outages, degraded = g.flaps, g.flapDegraded
	g.flaps, g.flapDegraded, g.lastSummary = 0, 0, now
	return outages, degraded, true
}

// stillDown is told of each decision degraded by brk's node at now: an
// outage not logged when it started (the node was flapping) is logged once
// it has lasted flapWindow, so a long outage is never silent.
func (s *Store) stillDown(brk *breaker, now int64) {
	if brk.log.logged.Load() {
		return
	}
	start := brk.outageStart.Load()
	if start == 0 || now-start < flapWindow || !brk.log.logged.CompareAndSwap(false, true) {
		return
	}
	brk.log.mu.Lock()
	err := brk.log.lastErr
	brk.log.flaps-- // logged now, no longer only counted
	brk.log.mu.Unlock()
	s.logOutage(brk, err, time.Duration(now-start)*time.Microsecond)
}

// logOutage logs the start of an outage; for one logged late, after how long.
// The engine adds its own words (its failure policy, the fleet its fallback
// divides by: see Up.Note).
func (s *Store) logOutage(brk *breaker, err error, late time.Duration) {
	attrs := []any{"node", brk.node, "error", err, "reason", Reason(err)}
	if cause := diagnose(brk.node, err); cause != "" {
		attrs = append(attrs, "cause", cause)
	}
	if late > 0 {
		attrs = append(attrs, "down_for", late)
	}
	if s.up.Note != nil {
		attrs = append(attrs, s.up.Note()...)
	}
	s.up.Log().Warn("sluice: store unavailable, deciding under the failure policy", attrs...)
}

// recovered records the end of an outage of brk's node at now; movedTo,
// if set, names the node its keys moved to (the node is retired).
func (s *Store) recovered(brk *breaker, now int64, movedTo string) {
	start := brk.outageStart.Swap(0)
	if start == 0 {
		return
	}
	s.openNodes.Add(-1)
	outage := time.Duration(now-start) * time.Microsecond
	degraded := brk.degraded.Load()
	if s.up.Obs != nil {
		s.up.Obs.ObserveRecovered(Outage{Node: brk.node, Start: time.UnixMicro(start), Duration: outage, Degraded: degraded})
	}
	g := &brk.log
	g.mu.Lock()
	g.lastRecovery = now
	logged := g.logged.Swap(false)
	if !logged {
		g.flapDegraded += degraded
	}
	n, flapDegraded, due := g.summary(now)
	err := g.lastErr
	g.mu.Unlock()
	switch {
	case logged && movedTo != "":
		s.up.Log().Info("sluice: store recovered: the node's keys moved to another (a failover); the node is retired",
			"node", brk.node, "moved_to", movedTo, "outage", outage, "degraded_decisions", degraded)
	case logged:
		s.up.Log().Info("sluice: store recovered", "node", brk.node, "outage", outage, "degraded_decisions", degraded)
	}
	if due {
		s.logFlapping(brk, n, flapDegraded, err)
	}
}

// diagnose says what a timeout opening an outage of node hides, when a
// quick dial can tell: go-redis retries a refused dial within the budget,
// so the calls end by the deadline, and the log would say "timeout" for a
// port nobody listens on. It dials node's address once (at most 20 ms,
// once per outage logged) and names the cause; "" when err is no timeout
// or node is no address.
func diagnose(node string, err error) string {
	if Reason(err) != ReasonTimeout {
		return ""
	}
	if _, _, serr := net.SplitHostPort(node); serr != nil {
		return ""
	}
	conn, derr := (&net.Dialer{Timeout: 20 * time.Millisecond}).Dial("tcp", node)
	switch {
	case derr == nil:
		_ = conn.Close()
		return "the address accepts connections: the server is slow or hung, or the client's pool is exhausted"
	case errors.Is(derr, syscall.ECONNREFUSED):
		return "connection refused: nothing listens at the address (the calls ran out of time while the client retried its dial)"
	}
	return "no connection within 20 ms: the address does not answer"
}
