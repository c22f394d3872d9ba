package redisstore

import "sync/atomic"

// route says where one decision goes.
type route int8

const (
	viaStore route = iota // the store is healthy
	viaProbe              // the store is down; this call finds out whether it is back
	viaLocal              // the store is down; decide without it
)

// Breaker modes, in the low two bits of breaker.state.
const (
	modeClosed  = 0
	modeOpen    = 1
	modeProbing = 2
)

// breaker stops paying the store's time budget on every request once a
// node is known to be failing. Its whole state (mode and the microsecond
// it was entered) is one atomic word that the hot path reads without
// locking. While open, one request at a time, at most every cooldown, is
// sent to the store as a probe; closeAfter successes in a row close the
// breaker (hysteresis: a store that answers one call in two stays open,
// rather than costing every other request its budget). Probes ride on real
// requests: the breaker starts no goroutine.
type breaker struct {
	state      atomic.Int64 // since<<2 | mode
	fails      atomic.Int32 // consecutive failures while closed
	failedAt   atomic.Int64 // microsecond the last failure counted in fails ended
	goods      atomic.Int32 // consecutive good probes while open
	excused    atomic.Int64 // microsecond of the first timeout excused by a pause since the last answer; 0 if none (see onNode)
	threshold  int32
	closeAfter int32
	cooldown   int64 // microseconds between probes
	stale      int64 // microseconds after which a silent probe is replaced

	node        string                 // the node's name, as in Outage.Node
	outageStart atomic.Int64           // microsecond the current outage began, 0 if none
	degraded    atomic.Int64           // decisions made without the store in this outage
	log         outageLog              // what was logged of this node's outages
	failedKey   atomic.Pointer[string] // a Redis key whose call failed here, for the sweep
}

// clone returns a closed breaker with b's settings, for node.
func (b *breaker) clone(node string) *breaker {
	return &breaker{threshold: b.threshold, closeAfter: b.closeAfter, cooldown: b.cooldown, stale: b.stale, node: node}
}

// route says how a call at now goes: to the store on a closed breaker;
// else a probe when one is due, or to the fallback.
func (b *breaker) route(now int64) route {
	if s := b.state.Load(); s&3 != modeClosed {
		return b.routeOpen(s, now)
	}
	return viaStore
}

// routeOpen is route for a breaker whose state s is not closed. (Out of
// route's line: route is inlined in every call's first step.)
//
//go:noinline
func (b *breaker) routeOpen(s, now int64) route {
	since := s >> 2
	switch s & 3 {
	case modeOpen:
		if now-since >= b.cooldown && b.state.CompareAndSwap(s, now<<2|modeProbing) {
			return viaProbe
		}
	case modeProbing:
		if now-since >= b.stale && b.state.CompareAndSwap(s, now<<2|modeProbing) {
			return viaProbe
		}
	}
	return viaLocal
}

// success records a store answer at now; it reports whether it ended an
// outage.
func (b *breaker) success(r route, now int64) bool {
	if b.fails.Load() != 0 { // a store only when needed keeps the line shared by every caller quiet
		b.fails.Store(0)
	}
	if r != viaProbe {
		return false
	}
	if b.goods.Add(1) < b.closeAfter {
		b.state.Store(now<<2 | modeOpen) // the next probe after cooldown
		return false
	}
	b.goods.Store(0)
	b.state.Store(modeClosed)
	return true
}

// failure records the failure, at end, of a store call sent at sent; it
// reports whether it began an outage. A call sent before the last counted
// failure ended was under way beside it, and is not counted again.
func (b *breaker) failure(r route, sent, end int64) bool {
	if r == viaProbe {
		b.goods.Store(0)
		b.state.Store(end<<2 | modeOpen)
		return false
	}
	last := b.failedAt.Load()
	if sent < last || !b.failedAt.CompareAndSwap(last, end) {
		return false
	}
	if b.fails.Add(1) < b.threshold {
		return false
	}
	now := end
	s := b.state.Load()
	return s&3 == modeClosed && b.state.CompareAndSwap(s, now<<2|modeOpen)
}

// abandon records a probe that ended without an answer because its caller
// gave up: the next request may probe at once.
func (b *breaker) abandon(r route, now int64) {
	if r == viaProbe {
		b.state.Store((now-b.cooldown)<<2 | modeOpen)
	}
}

// isOpen reports whether requests are routed away from the store.
func (b *breaker) isOpen() bool { return b.state.Load()&3 != modeClosed }
