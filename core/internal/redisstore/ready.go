package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Ready is Limiter.Ready on Redis.
func (s *Store) Ready(ctx context.Context) error {
	clients, err := s.nodeClients(ctx)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", errUnavailable, readyCause(err), err)
	}
	warm := s.connsWanted()
	var wg sync.WaitGroup
	errs := make([]error, len(clients))
	for i, c := range clients {
		wg.Go(func() { errs[i] = s.readyNode(ctx, c, warm) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// readyNode checks one node: warm connections, a script, the eviction
// policy. c is nil for a client whose nodes the limiter cannot see (any
// other redis.Scripter): then only the script is checked.
func (s *Store) readyNode(ctx context.Context, c *redis.Client, warm int) error {
	name := s.whole.brk.node
	var rdb redis.Scripter = s.rdb
	if c != nil {
		name, rdb = c.Options().Addr, c
		if err := WarmPool(ctx, c, warm); err != nil {
			return fmt.Errorf("%w: node %s: %s: %w", errUnavailable, name, readyCause(err), err)
		}
		if err := s.laneOf(c).warm(ctx); err != nil {
			return fmt.Errorf("%w: node %s: %s: %w", errUnavailable, name, readyCause(err), err)
		}
	}
	if err := readyScript.Run(ctx, rdb, nil).Err(); err != nil {
		return fmt.Errorf("%w: node %s: %s: %w", errUnavailable, name, readyCause(err), err)
	}
	if c == nil {
		return nil
	}
	// Load every script, in one round trip: a decision after Ready then
	// pays one EVALSHA, never NOSCRIPT and EVAL.
	pipe := c.Pipeline()
	for _, src := range scriptSources() {
		pipe.ScriptLoad(ctx, src)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("%w: node %s: %s: %w", errUnavailable, name, readyCause(err), err)
	}
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		var reply redis.Error
		if errors.As(err, &reply) {
			// The server answered but will not tell its policy: the
			// user may not run INFO (NOPERM; docs/production.md lists
			// it in the ACL), or the server has no such section (an
			// embedded miniredis in tests). The node is ready.
			return nil
		}
		return fmt.Errorf("%w: node %s: %s: %w", errUnavailable, name, readyCause(err), err)
	}
	if policy := InfoField(info, "maxmemory_policy"); Evicts(policy) {
		return fmt.Errorf("%w: node %s: maxmemory-policy %s can evict what the limiter must keep (%s); use volatile-lfu (docs/production.md)",
			errUnavailable, name, policy, evictionRisk(policy))
	}
	s.notePersistence(ctx, c, name)
	return nil
}

// notePersistence logs once per node that keeps no append-only file: a
// restart then loses what calendar and interval quotas counted since the
// node's last snapshot (everything, without snapshots), and the window
// keeps only what living replicas re-assert of it (docs/topologies.md,
// "Quotas across a loss"). The node is ready all the same: limits that
// refill continuously lose at most a burst. A server that will not tell
// (NOPERM, no such section) is not warned about.
func (s *Store) notePersistence(ctx context.Context, c *redis.Client, name string) {
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil || InfoField(info, "aof_enabled") != "0" {
		return
	}
	if _, warned := s.persistWarned.LoadOrStore(name, true); warned {
		return
	}
	s.up.Log().Warn("sluice: a Redis node keeps no append-only file (appendonly no): after a restart, calendar and interval quotas keep only what living replicas re-assert of the current window; a quota that must survive a restart needs appendonly yes (docs/topologies.md)",
		"node", name)
}

// Evicts reports whether a maxmemory policy can evict keys the limiter
// must keep: every allkeys- policy can evict the keys without an expiry
// (run-time overrides, their versions and epochs, concurrency lease sets),
// volatile-ttl Evicts first the buckets with the shortest expiry, which
// are the busiest ones, and volatile-random any bucket at all.
// (volatile-lru is not refused, but warned about: see lruAdvice.)
func Evicts(policy string) bool {
	return strings.HasPrefix(policy, "allkeys-") || policy == "volatile-ttl" || policy == "volatile-random"
}

// evictionRisk says what policy can evict.
func evictionRisk(policy string) string {
	if policy == "volatile-ttl" {
		return "the busiest buckets have the shortest expiries and are evicted first, then come back full"
	}
	if policy == "volatile-random" {
		return "any bucket, busy or not, may be evicted and come back full"
	}
	return "keys without an expiry (run-time overrides, concurrency lease sets) as well as busy buckets"
}

// lruAdvice is the warning for volatile-lru: it keeps the keys without an
// expiry, but Redis's LRU clock counts whole seconds, so a bucket used a
// thousand times a second looks as idle as a key written once in the same
// second, and may be evicted and come back full (TestEvictionTable: up to
// 1.32× a hot key's limit when other data with an expiry shares the
// instance; volatile-lfu kept it at 1.00×).
const lruAdvice = "volatile-lru may evict a busy bucket, which then comes back full (Redis's LRU clock counts whole seconds): a hot key was admitted up to 1.32x its limit in our measurements; volatile-lfu keeps the busiest buckets"

// InfoField returns the value of field in an INFO reply.
func InfoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// readyCause says in words what err means for a probe.
func readyCause(err error) string {
	switch Reason(err) {
	case ReasonRefused:
		return "connection refused: nothing listens at the address"
	case ReasonTimeout:
		return "no answer before the probe's deadline"
	case ReasonAuth:
		return "authentication failed (check the client's user and password)"
	case ReasonNoPerm:
		return "the Redis user lacks a permission the limiter needs (see the ACL in docs/production.md)"
	case ReasonLoading:
		return "the server is loading its dataset"
	case ReasonReadOnly:
		return "the node is a replica (a failover may be in progress)"
	case ReasonClusterDown:
		return "the Cluster cannot serve its slots"
	case ReasonConnection:
		return "the connection broke"
	}
	return "the store failed"
}

// nodeClients returns the clients of the store's nodes: every master of a
// Cluster, every shard of a Ring, the one client of a single server; a
// nil client for any other redis.Scripter.
func (s *Store) nodeClients(ctx context.Context) ([]*redis.Client, error) {
	var mu sync.Mutex
	var out []*redis.Client
	add := func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		out = append(out, c)
		mu.Unlock()
		return nil
	}
	switch c := s.rdb.(type) {
	case *redis.Client:
		return []*redis.Client{c}, nil
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, add); err != nil {
			return nil, err
		}
		return out, nil
	case *redis.Ring:
		if err := c.ForEachShard(ctx, add); err != nil {
			return nil, err
		}
		return out, nil
	}
	return []*redis.Client{nil}, nil
}
