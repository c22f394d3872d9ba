package core

import (
	"context"
)

// sweepEvery bounds, in microseconds, how often decisions look for nodes to
// retire.
const sweepEvery = 100_000

// maybeSweep is called after each store answer: while some node's breaker
// is open on a Cluster, it looks (at most every sweepEvery) for open nodes
// that no longer own the keys that failed there. A failed-over master's
// slots move to its replica, a node of its own; the old node then gets no
// traffic, no probe would ever close its breaker, and it would read as down
// forever (sluice_store_up 0). Such a node is retired: its outage ends, as
// its keys are back on Redis elsewhere.
func (l *Limiter) maybeSweep(ctx context.Context, now int64) {
	if l.openNodes.Load() == 0 || l.redis.nodeOf == nil {
		return
	}
	last := l.lastSweep.Load()
	if now-last < sweepEvery || !l.lastSweep.CompareAndSwap(last, now) {
		return
	}
	l.redis.nodes.Range(func(k, v any) bool {
		n := v.(*node)
		key := n.brk.failedKey.Load()
		if !n.brk.isOpen() || key == nil {
			return true
		}
		owner, addr, ok := l.redis.ownerOf(ctx, *key)
		if !ok || owner == k {
			return true
		}
		l.redis.nodes.Delete(k)
		l.recovered(n.brk, now, addr)
		return true
	})
}
