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
		var policy string
		_, err := l.onNode(ctx, nd, l.now(), opPolicy, "", func() (time.Duration, error) {
			start := time.Now()
			info, err := nd.client.Info(ctx, "memory").Result()
			if redis.HasErrorPrefix(err, "NOPERM") {
				return time.Since(start), nil // cannot be read; the ACL in docs/production.md allows INFO
			}
			policy = infoField(info, "maxmemory_policy")
			return time.Since(start), err
		})
		if err != nil {
			nd.policy.Store(false) // read at a later answer
			return
		}
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
