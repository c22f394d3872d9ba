package core

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// policyReader reads each node's eviction policy once, at the limiter's
// first answer from that node, in a goroutine of its own that Close stops
// and waits for, and logs one warning per node whose policy can evict what
// the limiter must keep (see evicts), or busy buckets (volatile-lru, see
// lruAdvice). Its zero value is ready to use.
type policyReader struct {
	mu     sync.Mutex
	wg     sync.WaitGroup
	ctx    context.Context // made on first use; cancelled by close
	cancel context.CancelFunc
	closed bool
}

// opPolicy is the operation kind of that read: one INFO per node and
// limiter, so not among the exported kinds a decision may cost.
const opPolicy = "policy"

// readPolicy reads nd's policy unless it has been read (or is being read).
// It is called after an answer from nd, on the caller's goroutine, and
// returns at once.
func (l *Limiter) readPolicy(nd *node) {
	if nd.client == nil || !nd.policy.CompareAndSwap(false, true) {
		return
	}
	p := &l.evictPolicy
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if p.ctx == nil {
		p.ctx, p.cancel = context.WithCancel(context.Background())
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(p.ctx, max(l.timeout, time.Second))
		defer cancel()
		// Like the fleet heartbeat (see sendOp), the read is governed by
		// no failure policy and feeds no breaker: a slow answer must not
		// close a breaker that decisions opened, nor a failure open one.
		// The default sections: the policy (memory), and the server's
		// identity (server, persistence), which tells the lease scripts
		// of a restart (see serverSeen) even before this limiter's first
		// slot.
		start := time.Now()
		info, err := nd.client.Info(ctx).Result()
		if l.obs != nil {
			l.obs.ObserveStore(StoreCall{Node: nd.brk.node, Op: opPolicy, Latency: time.Since(start), Err: err})
		}
		if redis.HasErrorPrefix(err, "NOPERM") {
			return // cannot be read; the ACL in docs/production.md allows INFO
		}
		if err != nil {
			nd.policy.Store(false) // read at a later answer
			return
		}
		l.keeper().seed(nd, info)
		policy := infoField(info, "maxmemory_policy")
		switch {
		case evicts(policy):
			l.log().Warn("sluice: the Redis node's maxmemory-policy can evict what the limiter must keep; set maxmemory-policy volatile-lfu (docs/production.md)",
				"node", nd.brk.node, "maxmemory_policy", policy, "risk", evictionRisk(policy))
		case policy == "volatile-lru":
			l.log().Warn("sluice: the Redis node's maxmemory-policy can evict busy buckets; set maxmemory-policy volatile-lfu (docs/production.md)",
				"node", nd.brk.node, "maxmemory_policy", policy, "risk", lruAdvice)
		}
	}()
}

// close stops a read under way and waits for it.
func (p *policyReader) close() {
	p.mu.Lock()
	p.closed = true
	if p.cancel != nil {
		p.cancel()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
