package redisstore

import (
	"context"
)

// sweepEvery bounds, in microseconds, how often decisions look for s.nodes to
// retire.
const sweepEvery = 100_000

// maybeSweep is called after each store answer: while some node's breaker
// is open on a Cluster, it looks (at most every sweepEvery) for open s.nodes
// that no longer own the keys that failed there. A failed-over master's
// slots move to its replica, a node of its own; the old node then gets no
// traffic, no probe would ever close its breaker, and it would read as down
// forever (sluice_store_up 0). Such a node is retired: its outage ends, as
// its keys are back on Redis elsewhere.
//
// It is inlined: with no node open it calls nothing.
func (s *Store) maybeSweep(ctx context.Context, now int64) {
	if s.openNodes.Load() != 0 && s.nodeOf != nil {
		s.sweep(ctx, now)
	}
}

// sweep is maybeSweep once a node is open on a Cluster.
func (s *Store) sweep(ctx context.Context, now int64) {
	last := s.lastSweep.Load()
	if now-last < sweepEvery || !s.lastSweep.CompareAndSwap(last, now) {
		return
	}
	s.nodes.Range(func(k, v any) bool {
		n := v.(*node)
		key := n.brk.failedKey.Load()
		if !n.brk.isOpen() || key == nil {
			return true
		}
		owner, addr, ok := s.ownerOf(ctx, *key)
		if !ok || owner == k {
			return true
		}
		s.nodes.Delete(k)
		n.lane.close()
		s.recovered(n.brk, now, addr)
		return true
	})
}
