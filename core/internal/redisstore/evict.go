package redisstore

import (
	"context"
	"time"
)

// opPolicy is the operation kind of that read: one INFO per node and
// limiter, so not among the exported kinds a decision may cost.
const opPolicy = "policy"

// readPolicy reads nd's eviction policy once, at the limiter's first
// answer from nd (unless it is being read, or was), as a background task
// that Close stops and waits for (see background), and logs one warning
// per node whose policy can evict what the limiter must keep (see evicts),
// or busy buckets (volatile-lru, see lruAdvice). The same INFO tells the
// lease keeper which server the node is (see leaseKeeper.seed). It is
// called on the caller's goroutine and returns at once.
func (s *Store) readPolicy(nd *node) {
	if !nd.visible() || !nd.policy.CompareAndSwap(false, true) {
		return
	}
	s.bg.Run(func(bg context.Context) {
		ctx, cancel := context.WithTimeout(bg, max(s.cfg.Budget, time.Second))
		defer cancel()
		// Like the fleet heartbeat (see sendOp), the read is governed by
		// no failure policy and feeds no breaker: a slow answer must not
		// close a breaker that decisions opened, nor a failure open one.
		// The default sections: the policy (memory), and the server's
		// identity (server, persistence), which tells the lease scripts
		// of a restart (see serverSeen) even before this limiter's first
		// slot.
		start := time.Now()
		info, err := nd.info(ctx)
		if s.up.Obs != nil && (err == nil || bg.Err() == nil) {
			// A read that Close cut short is not the node's failure.
			s.up.Obs.ObserveStore(Call{Node: nd.brk.node, Op: opPolicy, Latency: time.Since(start), Err: err})
		}
		if Reason(err) == ReasonNoPerm {
			return // cannot be read; the ACL in docs/production.md allows INFO
		}
		if err != nil {
			nd.policy.Store(false) // read at a later answer
			return
		}
		s.seen.seed(nd, info)
		policy := InfoField(info, "maxmemory_policy")
		switch {
		case Evicts(policy):
			s.up.Log().Warn("sluice: the Redis node's maxmemory-policy can evict what the limiter must keep; set maxmemory-policy volatile-lfu (docs/production.md)",
				"node", nd.brk.node, "maxmemory_policy", policy, "risk", evictionRisk(policy))
		case policy == "volatile-lru":
			s.up.Log().Warn("sluice: the Redis node's maxmemory-policy can evict busy buckets; set maxmemory-policy volatile-lfu (docs/production.md)",
				"node", nd.brk.node, "maxmemory_policy", policy, "risk", lruAdvice)
		}
	})
}
