package redisstore

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

// AckConfig is the setting of core.WithReplicaAck.
type AckConfig struct {
	Replicas int
	Timeout  time.Duration
	Set      bool
}

// Validate checks c against the limiter's budget (0: none).
func (c AckConfig) Validate(budget time.Duration) error {
	switch {
	case !c.Set:
		return nil
	case c.Replicas < 1:
		return fmt.Errorf("core: WithReplicaAck: %d replicas, want at least 1", c.Replicas)
	case c.Timeout < time.Millisecond:
		return fmt.Errorf("core: WithReplicaAck: timeout %s, want at least 1ms (WAIT counts whole milliseconds, and 0 would wait forever)", c.Timeout)
	case budget > 0 && c.Timeout > budget:
		return fmt.Errorf("core: WithReplicaAck: timeout %s is longer than the limiter's budget of %s (WithTimeout)", c.Timeout, budget)
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

// AckProbeEvery is how often, while a node's replicas fall short, one call
// on it waits to find out whether they are back.
const AckProbeEvery = 100 * time.Millisecond

// newReplicaAck returns the store's WAIT for the validated setting c, or
// nil if it asks for none. log gives the limiter's logger.
func newReplicaAck(c AckConfig, log func() *slog.Logger) *replicaAck {
	if !c.Set {
		return nil
	}
	return &replicaAck{replicas: c.Replicas, timeout: c.Timeout.Truncate(time.Millisecond), log: log}
}

func (s *Store) AckMisses() int64 {
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
		if now-last < int64(AckProbeEvery) || !n.probed.CompareAndSwap(last, now) {
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
func (s *Store) evalAcked(ctx context.Context, n *node, c *Query) (decision, error) {
	keys, args := c.lone()
	sc := []scriptCall{{keys: keys, args: args}}
	s.runAcked(ctx, n, sc)
	var d decision
	if sc[0].err != nil {
		return d, sc[0].err
	}
	err := c.decode(sc[0].vals, &d)
	return d, err
}

// sendAcked decides groups of members on n, one script call per group (the
// lone form for a group of one), in one pipeline followed by WAIT.
func (s *Store) sendAcked(ctx context.Context, n *node, groups [][]*batch.Member[*Query, decision]) {
	calls := make([]scriptCall, len(groups))
	for i, g := range groups {
		if len(g) == 1 {
			c := g[0].Req
			keys, args := c.lone()
			calls[i] = scriptCall{keys: keys, args: args}
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
func (s *Store) runAcked(ctx context.Context, n *node, calls []scriptCall) {
	if n.client == nil {
		// No connection of the node's own to wait on: decide without.
		decided := 0
		for i := range calls {
			c := &calls[i]
			c.vals, c.err = RunInts(ctx, s.rdb, BucketScript, c.keys, c.args, false)
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
		c.vals, c.err = RunInts(ctx, s.rdb, BucketScript, c.keys, c.args, false)
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
func (s *Store) pipeAcked(ctx context.Context, n *node, calls []scriptCall, only []int, eval bool) (decided int, acked int64, err error) {
	pipe := n.client.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i := range calls {
		if only != nil && !slices.Contains(only, i) {
			continue
		}
		c := &calls[i]
		if eval {
			cmds[i] = BucketScript.Eval(ctx, pipe, c.keys, c.args...)
		} else {
			cmds[i] = BucketScript.EvalSha(ctx, pipe, c.keys, c.args...)
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
