package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/batch"
)

// WithReplicaAck makes the limiter wait, after every decision's script
// call (Allow, Wait, Reserve and their batches), until replicas replicas
// have acknowledged the call's writes, or timeout has passed. Other
// operations are not waited on: settlements, paths, concurrency slots and
// token leases (a failover that loses their last writes is answered in
// docs/topologies.md). The wait is Redis's WAIT command, sent in the same pipeline and on
// the same connection as the script (one round trip): a single server or
// Sentinel failover client's pipeline, and on a Cluster or Ring the pipeline
// of the master or shard that holds the keys.
//
// What it bounds: replication is asynchronous, so without it a master that
// crashes loses the decisions it acknowledged but had not yet sent to a
// replica, and the promoted replica's buckets are fuller than they should
// be (up to one burst per key, or more for a limit that refills slower than
// the failover takes). With it, a decision is returned only once a replica
// holds it: a crash loses only decisions whose wait fell short, and those
// are counted (see [Limiter.ReplicaAckMisses]). It does not cover a
// graceful failover (SENTINEL FAILOVER), in which the old master keeps
// accepting writes, with no replica left to acknowledge them, until clients
// switch; set min-replicas-to-write on the master for that.
//
// What it costs: every call waits for a replica's acknowledgement (a round
// trip from master to replica and back) and holds its connection meanwhile;
// docs/topologies.md has the throughput we measured. A call that wrote
// nothing (a denial without a penalty) is answered at once by Redis, unless
// the connection's earlier writes are still unacknowledged.
//
// When fewer replicas than asked acknowledge within timeout, the decision
// stands: Redis has already applied it, and undoing or repeating it would
// charge the bucket twice. It is not a store failure either: a replica down
// (or a promoted replica with no replica of its own yet) would otherwise
// send every key to the fallback for as long as it lasts. Instead the
// decision is counted in [Limiter.ReplicaAckMisses], and the limiter logs
// once that replicas stopped acknowledging and once that they are back (per
// Cluster master). Until they are back, one call per node every 100ms waits
// as a probe and the others are sent without a wait (and counted), so that
// a missing replica does not cost every call the timeout. The same holds
// when the wait's reply is lost after the script's: the decision stands and
// is counted.
//
// timeout is counted in whole milliseconds (rounded down); each call's wait
// is also cut to end a millisecond before the call's budget. Redis notices
// an expired WAIT only when its event loop wakes, which an idle server does
// hz times a second (10 by default): a wait that falls short can last up to
// about 100ms longer than asked, and is then cut by the budget. A call whose
// keys moved to another Cluster master (MOVED, ASK) is decided through the
// Cluster client, which follows the redirect, without a wait, and counted.
// Other redis.Scripter implementations are never waited on, and every
// decision they make is counted. [New] returns an error for replicas below
// 1, a timeout below 1ms, or one longer than the budget ([WithTimeout]).
//
// Default: off (no wait).
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(o *options) { o.ack = ackConfig{replicas: replicas, timeout: timeout, set: true} }
}

// ackConfig is the setting of [WithReplicaAck].
type ackConfig struct {
	replicas int
	timeout  time.Duration
	set      bool
}

// validate checks c against the limiter's budget (0: none).
func (c ackConfig) validate(budget time.Duration) error {
	switch {
	case !c.set:
		return nil
	case c.replicas < 1:
		return fmt.Errorf("core: WithReplicaAck: %d replicas, want at least 1", c.replicas)
	case c.timeout < time.Millisecond:
		return fmt.Errorf("core: WithReplicaAck: timeout %s, want at least 1ms (WAIT counts whole milliseconds, and 0 would wait forever)", c.timeout)
	case budget > 0 && c.timeout > budget:
		return fmt.Errorf("core: WithReplicaAck: timeout %s is longer than the limiter's budget of %s (WithTimeout)", c.timeout, budget)
	}
	return nil
}

// replicaAck is the store's WAIT after every script call.
type replicaAck struct {
	replicas int
	timeout  time.Duration // whole milliseconds, at least one
	misses   atomic.Int64  // decisions applied without the acknowledgement asked for
	log      func() *slog.Logger
}

// ackProbeEvery is how often, while a node's replicas fall short, one call
// on it waits to find out whether they are back.
const ackProbeEvery = 100 * time.Millisecond

// newReplicaAck returns the store's WAIT for the validated setting c, or
// nil if it asks for none. log gives the limiter's logger.
func newReplicaAck(c ackConfig, log func() *slog.Logger) *replicaAck {
	if !c.set {
		return nil
	}
	return &replicaAck{replicas: c.replicas, timeout: c.timeout.Truncate(time.Millisecond), log: log}
}

func (s *redisStore) AckMisses() int64 {
	if s.ack == nil {
		return 0
	}
	return s.ack.misses.Load()
}

// waitFor returns how long the WAIT of a call on n under ctx may block: the
// timeout, cut to end a millisecond before ctx's deadline, so that the
// reply can still be read, and never below 1ms (WAIT 0 blocks forever). It
// returns 0 for a call that should not wait: n's replicas fall short, and
// another call probed them less than ackProbeEvery ago.
func (a *replicaAck) waitFor(ctx context.Context, n *node) time.Duration {
	if n.short.Load() {
		now := time.Now().UnixNano()
		last := n.probed.Load()
		if now-last < int64(ackProbeEvery) || !n.probed.CompareAndSwap(last, now) {
			return 0
		}
	}
	d := a.timeout
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)-time.Millisecond)
	}
	return max(d.Truncate(time.Millisecond), time.Millisecond)
}

// report records the outcome of one WAIT on n that covered decided
// decisions: acked replicas acknowledged them, or err was its error.
func (a *replicaAck) report(n *node, decided int, acked int64, err error) {
	if decided == 0 {
		return
	}
	if err == errNoWait {
		a.misses.Add(int64(decided))
		return
	}
	if err == nil && acked >= int64(a.replicas) {
		if n.short.Load() && n.short.CompareAndSwap(true, false) {
			a.log().Info("sluice: replicas acknowledge the limiter's writes again", a.attrs(n, acked, err)...)
		}
		return
	}
	a.misses.Add(int64(decided))
	if !n.short.Load() && n.short.CompareAndSwap(false, true) {
		a.log().Warn("sluice: replicas did not acknowledge the limiter's writes in time; decisions stand, counted by ReplicaAckMisses, and each call now waits at most 1ms until they do",
			a.attrs(n, acked, err)...)
	}
}

// attrs describes one WAIT's outcome for a log line.
func (a *replicaAck) attrs(n *node, acked int64, err error) []any {
	attrs := []any{"want", a.replicas, "acknowledged", acked, "timeout", a.timeout}
	if n.brk != nil && n.brk.node != "" {
		attrs = append(attrs, "node", n.brk.node)
	}
	if err != nil {
		attrs = append(attrs, "error", err)
	}
	return attrs
}

// scriptCall is one script call on a node and its outcome.
type scriptCall struct {
	keys []string
	args []any
	vals []int64
	err  error
}

// evalAcked runs c alone on n, followed by WAIT.
func (s *redisStore) evalAcked(ctx context.Context, n *node, c *call) (decision, error) {
	sc := []scriptCall{{keys: c.keys[:], args: c.loneArgs()}}
	s.runAcked(ctx, n, sc)
	if sc[0].err != nil {
		return decision{}, sc[0].err
	}
	if len(sc[0].vals) != replyWidth {
		return decision{}, fmt.Errorf("%w of %d values, want %d", errBadReply, len(sc[0].vals), replyWidth)
	}
	return parseReply(sc[0].vals, c.plan)
}

// sendAcked decides groups of members on n, one script call per group (the
// lone form for a group of one), in one pipeline followed by WAIT.
func (s *redisStore) sendAcked(ctx context.Context, n *node, groups [][]*batch.Member[*call, decision]) {
	calls := make([]scriptCall, len(groups))
	for i, g := range groups {
		if len(g) == 1 {
			c := g[0].Req
			calls[i] = scriptCall{keys: c.keys[:], args: c.loneArgs()}
			continue
		}
		keys, args := batchArgs(g)
		calls[i] = scriptCall{keys: keys, args: args}
	}
	s.runAcked(ctx, n, calls)
	for i, g := range groups {
		deliver(g, calls[i].vals, calls[i].err)
	}
}

// runAcked runs calls on n's own client in one pipeline followed by WAIT,
// so that the WAIT covers their writes, and reports the acknowledgement.
// Calls answered NOSCRIPT are run again as EVAL, with a WAIT of their own;
// calls redirected to another Cluster master go through the Cluster client,
// without a wait.
func (s *redisStore) runAcked(ctx context.Context, n *node, calls []scriptCall) {
	if n.client == nil {
		// No connection of the node's own to wait on: decide without.
		decided := 0
		for i := range calls {
			c := &calls[i]
			c.vals, c.err = runInts(ctx, s.rdb, bucketScript, c.keys, c.args, false)
			if c.err == nil {
				decided += len(c.keys)
			}
		}
		s.ack.misses.Add(int64(decided))
		return
	}
	var again, moved []int
	decided, acked, err := s.pipeAcked(ctx, n, calls, nil, false)
	for i := range calls {
		switch e := calls[i].err; {
		case e == nil:
		case redis.HasErrorPrefix(e, "NOSCRIPT"):
			again = append(again, i)
		case redis.HasErrorPrefix(e, "MOVED") || redis.HasErrorPrefix(e, "ASK"):
			moved = append(moved, i)
		}
	}
	s.ack.report(n, decided, acked, err)
	if len(again) > 0 {
		decided, acked, err = s.pipeAcked(ctx, n, calls, again, true)
		s.ack.report(n, decided, acked, err)
		for _, i := range again {
			if e := calls[i].err; e != nil && (redis.HasErrorPrefix(e, "MOVED") || redis.HasErrorPrefix(e, "ASK")) {
				moved = append(moved, i)
			}
		}
	}
	decided = 0
	for _, i := range moved {
		c := &calls[i]
		c.vals, c.err = runInts(ctx, s.rdb, bucketScript, c.keys, c.args, false)
		if c.err == nil {
			decided += len(c.keys)
		}
	}
	s.ack.misses.Add(int64(decided))
}

// pipeAcked sends calls (only those numbered in only, if it is not nil) on
// n's client in one pipeline, by EVALSHA or, with eval, by EVAL, followed by
// WAIT. It sets each call's outcome and returns how many keys the answered
// calls decided, and the WAIT's outcome.
func (s *redisStore) pipeAcked(ctx context.Context, n *node, calls []scriptCall, only []int, eval bool) (decided int, acked int64, err error) {
	pipe := n.client.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i := range calls {
		if only != nil && !slices.Contains(only, i) {
			continue
		}
		c := &calls[i]
		if eval {
			cmds[i] = bucketScript.Eval(ctx, pipe, c.keys, c.args...)
		} else {
			cmds[i] = bucketScript.EvalSha(ctx, pipe, c.keys, c.args...)
		}
	}
	var wait *redis.IntCmd
	if d := s.ack.waitFor(ctx, n); d > 0 {
		wait = redis.NewIntCmd(ctx, "wait", s.ack.replicas, d.Milliseconds())
		_ = pipe.Process(ctx, wait)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		c := &calls[i]
		c.vals, c.err = scriptReply(cmd)
		if c.err == nil {
			decided += len(c.keys)
		}
	}
	if wait == nil {
		return decided, 0, errNoWait
	}
	acked, err = wait.Result()
	return decided, acked, err
}

// errNoWait is the outcome of a call sent without a wait while its node's
// replicas fall short.
var errNoWait = errors.New("core: sent without WAIT while replicas fall short")

// scriptReply decodes a script call's reply. go-redis gives every command
// of a pipeline the error of a later one whose reply it could not read (a
// WAIT that outlived the budget); a reply that was read stands all the same.
func scriptReply(cmd *redis.Cmd) ([]int64, error) {
	vals, err := cmd.Int64Slice()
	if err != nil && cmd.Val() != nil {
		return redis.NewCmdResult(cmd.Val(), nil).Int64Slice()
	}
	return vals, err
}
