package core

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

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

// breaker stops paying the store's time budget on every request once the
// store is known to be failing. Its whole state (mode and the microsecond
// it was entered) is one atomic word that the hot path reads without
// locking. While open, one request at a time, at most every cooldown, is
// sent to the store as a probe; the first success closes the breaker.
// Probes ride on real requests: the breaker starts no goroutine.
type breaker struct {
	state     atomic.Int64 // since<<2 | mode
	fails     atomic.Int32 // consecutive failures while closed
	threshold int32
	cooldown  int64 // microseconds between probes
	stale     int64 // microseconds after which a silent probe is replaced

	node        string       // the Cluster master it guards; "" for the whole store
	outageStart atomic.Int64 // microsecond the current outage began, 0 if none
	degraded    atomic.Int64 // decisions made without the store in this outage
}

// nodeBreakers keeps one breaker per master of a Redis Cluster, so that a
// failing master sends only its own slots' keys to the failure policy. A
// key's master comes from go-redis's cached slot map; after a failover, the
// promoted replica gets a breaker of its own. When the map cannot be read,
// the template (the limiter's own breaker) serves.
type nodeBreakers struct {
	c        *redis.ClusterClient
	template *breaker
	m        sync.Map // *redis.Client -> *breaker
}

func (n *nodeBreakers) forKey(ctx context.Context, rkey string) *breaker {
	node, err := n.c.MasterForKey(ctx, rkey)
	if err != nil || node == nil {
		return n.template
	}
	if b, ok := n.m.Load(node); ok {
		return b.(*breaker)
	}
	b := &breaker{threshold: n.template.threshold, cooldown: n.template.cooldown, stale: n.template.stale, node: node.Options().Addr}
	actual, _ := n.m.LoadOrStore(node, b)
	return actual.(*breaker)
}

func (b *breaker) route(now int64) route {
	s := b.state.Load()
	since := s >> 2
	switch s & 3 {
	case modeClosed:
		return viaStore
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

// success records a store answer; it reports whether it ended an outage.
func (b *breaker) success(r route) bool {
	b.fails.Store(0)
	if r == viaProbe {
		b.state.Store(modeClosed)
		return true
	}
	return false
}

// failure records a store failure at now; it reports whether it began an
// outage.
func (b *breaker) failure(r route, now int64) bool {
	if r == viaProbe {
		b.state.Store(now<<2 | modeOpen)
		return false
	}
	if b.fails.Add(1) < b.threshold {
		return false
	}
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
