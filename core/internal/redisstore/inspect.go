package redisstore

import (
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/batch"
)

// What core's tests read of a store, and nothing else uses: the store's
// state is its own, so a test above it asks rather than reaches in.

// Prefix is the start of every name the store writes (core.WithPrefix).
func (s *Store) Prefix() string { return s.cfg.Prefix }

// Client is the Redis client the store was built on.
func (s *Store) Client() redis.Scripter { return s.rdb }

// WholeOpen reports whether the breaker of the store's whole client is
// open.
func (s *Store) WholeOpen() bool { return s.whole.brk.isOpen() }

// WholeClosed reports whether the breaker of the store's whole client is
// closed: neither open nor half open.
func (s *Store) WholeClosed() bool { return s.whole.brk.state.Load()&3 == modeClosed }

// WholeBreaker describes the settings of the whole client's breaker:
// threshold, closeAfter, cooldown in microseconds, and node.
func (s *Store) WholeBreaker() string {
	b := s.whole.brk
	return fmt.Sprintf("threshold %d, closeAfter %d, cooldown %dµs, node %q", b.threshold, b.closeAfter, b.cooldown, b.node)
}

// WaitBackground waits for the store's background tasks under way.
func (s *Store) WaitBackground() { s.bg.Wait() }

// WholeSeenRun is the run id (its prefix, as a number) the store knows of
// its whole client's server; 0 before its first answer.
func (s *Store) WholeSeenRun() int64 { return s.seen.server(&s.whole).run }

// Seen describes what the store knows of each node's server.
func (s *Store) Seen() []string {
	k := &s.seen
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for nd, sv := range k.servers {
		out = append(out, fmt.Sprintf("%s: %+v", nd.brk.node, sv))
	}
	return out
}

// SetRKey names the Redis key q decides: its RKey, and the KEYS of a lone
// call.
func (q *Query) SetRKey(rkey string) { q.RKey, q.keys[0] = rkey, rkey }

// SetShadows gives q the decisions of its plan's shadow limits, on the
// buckets rkey names by each shadow plan's fingerprint.
func (q *Query) SetShadows(rkey func(fp string) string) { q.setShadows(rkey) }

// ShadowRKeys returns the stored names of q's shadow limits' buckets.
func (q *Query) ShadowRKeys() []string {
	out := make([]string, len(q.shadow))
	for i := range q.shadow {
		out[i] = q.shadow[i].RKey
	}
	return out
}

// Lone returns the keys and arguments of a call that decides q alone.
func (q *Query) Lone() ([]string, []any) { return q.lone() }

// Decode decodes the reply of a call that decided q alone.
func (q *Query) Decode(vals []int64) (decision, error) {
	var d decision
	err := q.decode(vals, &d)
	return d, err
}

// Senders returns the store's senders of decisions, settlements and paths
// as its batches use them, on its whole client, or with split on one node
// of pipeline's (a Cluster's or Ring's).
func (s *Store) Senders(split bool, pipeline func() redis.Pipeliner) (batch.Sender[*Query, decision], batch.Sender[*SettleQuery, bool], batch.Sender[*PathQuery, PathAnswer]) {
	n := &s.whole
	if split {
		n = &node{}
	}
	return s.sendDecisions(n, split, pipeline), s.sendSettles(split, pipeline), s.sendPaths(split, pipeline)
}

// NewSettleQuery returns the settlement of a reservation under p made
// elapsed microseconds before now (the limiter's clock), as the store
// sends it: for a stepped limit, with its windows' arguments.
func NewSettleQuery(keys [2]string, delta, marker int64, p *plan, now, elapsed int64) *SettleQuery {
	return &SettleQuery{Keys: keys, Delta: delta, Marker: marker, Plan: p, args: settleLimitArgs(p, now, elapsed)}
}

// LoneArgs returns q's arguments in the lone form.
func (q *SettleQuery) LoneArgs() []any { return q.loneArgs() }

// DecodeBatch decodes the reply of one call of calls' batch form (see
// ScriptArgs) as the store's batches do: each call's decision or error.
func DecodeBatch(calls []*Query, vals []int64) ([]decision, []error) {
	members := make([]*batch.Member[*Query, decision], len(calls))
	for i, c := range calls {
		members[i] = &batch.Member[*Query, decision]{Req: c}
	}
	deliver(members, vals, nil)
	ds, errs := make([]decision, len(calls)), make([]error, len(calls))
	for i, m := range members {
		ds[i], errs[i] = m.Res, m.Err
	}
	return ds, errs
}
