package redisstore

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Connections are opened outside decisions. go-redis opens a connection
// when a call finds none idle, and the handshake (the dial, then HELLO and
// AUTH) is paid inside that call's context: inside the decision's budget.
// With Redis a few tens of milliseconds away, a handshake and a decision
// do not fit the budget together; and go-redis closes a connection whose
// call timed out, so after one blip every call would dial again, fail
// again, and the node would never answer within its budget: the breaker's
// probes would fail for as long as the process lives.
//
// So the limiter warms a node's pools itself, apart from any decision:
// [Limiter.Ready] does it before traffic, and every failure charged to a
// node starts one warm-up of that node in the background (at most one at
// a time and one a second per node), bounded by twice the client's dial
// timeout and stopped by [Limiter.Close]. The breaker's next probe then
// finds a connection ready.
//
// The two warm-ups differ in what they hold. Ready holds every connection
// it opens until all are open, so that n of them are distinct. A
// background warm-up runs beside traffic, often on a node that is
// struggling or on a machine that is starved of CPU, where a handshake can
// take a second: holding the pool there starved everyone else of it (the
// limiter's own probes, and go-redis's reload of the slot map after a
// Cluster failover, which then waited out its pool timeout; that kept a
// failed master's keys off Redis for over a second after the cluster had
// recovered). So it holds a connection only for its own handshake and
// ping, and runs at most half of the pool's size at once.

// warmState is a node's part of the warm-ups.
type warmState struct {
	warming  atomic.Bool
	warmedAt atomic.Int64 // unix nanoseconds of the last warm-up started
}

// warmEvery bounds how often one node is warmed in the background.
const warmEvery = time.Second

// connsWanted is how many connections a node's pool keeps warm: as many as
// the limiter keeps calls in flight to it, with room for operations of
// other kinds beside them. Unbatched (WithBatching(0), or a client that
// ignores deadlines), every caller in flight holds a connection of its
// own, as many as the pool lets it: the whole pool (warmCounts caps it at
// the pool's size). Warmed for batches alone, 16 callers 30 ms from Redis
// found 6 connections and paid a handshake inside their budget: 69-70% of
// their calls failed after Ready.
func (s *Store) connsWanted() int {
	if s.cfg.Inflight <= 0 || s.detached {
		return math.MaxInt32
	}
	return max(1, 3*s.cfg.Inflight+1)
}

// rewarm starts a background warm-up of nd's pools, unless one runs, one
// started less than warmEvery ago, the limiter is closed, or nd's client
// is unknown (a client type the limiter cannot see into).
func (s *Store) rewarm(nd *node) {
	c := nd.client
	if c == nil {
		return
	}
	now := time.Now().UnixNano()
	if now-nd.warm.warmedAt.Load() < int64(warmEvery) || !nd.warm.warming.CompareAndSwap(false, true) {
		return
	}
	nd.warm.warmedAt.Store(now)
	n := s.connsWanted()
	started := s.bg.Run(func(ctx context.Context) {
		defer nd.warm.warming.Store(false)
		ctx, cancel := context.WithTimeout(ctx, max(time.Second, 2*c.Options().DialTimeout))
		defer cancel()
		TopUpPool(ctx, c, n) // a failure is the breaker's to judge, by the calls
	})
	if !started {
		nd.warm.warming.Store(false)
	}
}

// WarmPool opens n connections of c's pool, and up to n of its pipeline
// pool (go-redis sends pipelines, which the limiter's batches and Cluster
// calls are, on a pool of their own), at once, and puts them back, so
// that n calls at once find a connection ready. It returns the first
// error.
func WarmPool(ctx context.Context, c *redis.Client, n int) error {
	n, pipes := warmCounts(c, n, c.Options().PoolSize)
	// One handshake first, alone: go-redis settles on it what the
	// server supports (its maintenance notifications), and two first
	// handshakes at once, one on each pool, race in go-redis itself.
	if err := c.Ping(ctx).Err(); err != nil {
		return err
	}
	conns := make([]*redis.Conn, n)
	errs := make([]error, n+pipes)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			conns[i] = c.Conn()
			errs[i] = conns[i].Ping(ctx).Err()
		})
	}
	// Pipelines started together overlap while they dial, so each
	// takes a connection of its own.
	for i := range pipes {
		wg.Go(func() {
			errs[n+i] = pingPipeline(ctx, c)
		})
	}
	wg.Wait()
	for _, cn := range conns {
		_ = cn.Close() // back to the pool
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// warmCounts is how many connections of c's main pool and of its pipeline
// pool a warm-up wanting n opens, when it may use at most most connections
// of a pool at once.
func warmCounts(c *redis.Client, n, most int) (conns, pipes int) {
	n = min(n, most)
	pipes = c.Options().PipelinePoolSize
	switch {
	case pipes == 0:
		pipes = 10 // go-redis's default
	case pipes < 0:
		pipes = 0 // no pipeline pool: pipelines use the main one
	}
	return n, min(n, pipes)
}

// TopUpPool is the background warm-up: up to n pings on c's main pool and
// as many one-command pipelines on its pipeline pool, at once, each holding
// its connection only while it runs, and never more of a pool than half
// its size. Pings started together overlap while they dial, so on a pool
// short of connections each opens one; on a pool with idle connections
// they find those and open none.
func TopUpPool(ctx context.Context, c *redis.Client, n int) {
	n, pipes := warmCounts(c, n, max(1, c.Options().PoolSize/2))
	if c.Ping(ctx).Err() != nil { // alone first, as in warmPool
		return
	}
	var wg sync.WaitGroup
	for range n { // one of them finds the first ping's connection
		wg.Go(func() { _ = c.Ping(ctx).Err() })
	}
	for range pipes {
		wg.Go(func() { _ = pingPipeline(ctx, c) })
	}
	wg.Wait()
}

// pingPipeline sends a one-command pipeline on c: it takes a connection of
// c's pipeline pool, opening one if none is idle.
func pingPipeline(ctx context.Context, c *redis.Client) error {
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Ping(ctx)
		return nil
	})
	return err
}
