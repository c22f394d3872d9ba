package core

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed bucket.lua
var bucketLua string

// bucketScript runs by EVALSHA; go-redis falls back to EVAL when Redis
// answers NOSCRIPT (after a restart or SCRIPT FLUSH).
var bucketScript = redis.NewScript(bucketLua)

// replyWidth is the number of integers the script returns per key.
const replyWidth = 5

// call is one decision asked of a store.
type call struct {
	key     string // the caller's key
	rkey    string // the stored name (see redisKey)
	plan    *plan
	cost    int64
	maxWait int64 // microseconds; 0 unless reserving
	penalty int64 // microseconds; 0 for none
}

// appendGroup appends c's script arguments as one group: cost, max wait,
// penalty, then the plan's limits.
func (c *call) appendGroup(args []any) []any {
	args = append(args, strconv.FormatInt(c.cost, 10), strconv.FormatInt(c.maxWait, 10), strconv.FormatInt(c.penalty, 10))
	return append(args, c.plan.args...)
}

// sameGroup reports whether c and o pass the script the same numbers, so
// that one group in a batch's arguments serves both.
func (c *call) sameGroup(o *call) bool {
	return c.cost == o.cost && c.maxWait == o.maxWait && c.penalty == o.penalty &&
		(c.plan == o.plan || c.plan.fp == o.plan.fp)
}

// appendArgs appends c's script arguments for a call that decides c alone.
func (c *call) appendArgs(args []any) []any {
	return c.appendGroup(append(args, "1"))
}

// scriptArgs returns the keys and script arguments that decide calls in
// order in one script call. Calls with the same numbers share a group, so
// that the script parses them once; a batch of one limit and one cost, the
// usual case, is a single group and needs nothing per key.
func scriptArgs(calls []*call) ([]string, []any) {
	keys := make([]string, len(calls))
	args := make([]any, 1, 8)
	var heads []*call // the first call of each group
	var groups []int  // each call's group, 1-based; needed with more than one
	for i, c := range calls {
		keys[i] = c.rkey
		g := 0
		for j, h := range heads {
			if h.sameGroup(c) {
				g = j + 1
				break
			}
		}
		if g == 0 {
			heads = append(heads, c)
			g = len(heads)
			args = c.appendGroup(args)
			if g == 2 {
				groups = make([]int, i, len(calls))
				for j := range groups {
					groups[j] = 1
				}
			}
		}
		if groups != nil {
			groups = append(groups, g)
		}
	}
	args[0] = strconv.Itoa(len(heads))
	for _, g := range groups {
		args = append(args, strconv.Itoa(g))
	}
	return keys, args
}

// redisStore decides in Redis through the bucket script, batching
// concurrent decisions where the client allows it.
type redisStore struct {
	rdb   redis.Scripter
	batch *batcher // nil: one script call per decision
}

func newRedisStore(rdb redis.Scripter, timeout time.Duration, inflight int) *redisStore {
	s := &redisStore{rdb: rdb}
	if inflight <= 0 {
		return s
	}
	b := &batcher{rdb: rdb, timeout: timeout, maxInflight: inflight, maxBatch: 256}
	switch c := rdb.(type) {
	case *redis.Client:
	case *redis.ClusterClient:
		b.pipe = c.Pipeline
	case *redis.Ring:
		b.pipe = c.Pipeline
	default:
		return s // unknown Scripter: one call per decision
	}
	s.batch = b
	return s
}

// decide decides c by dl (zero for no deadline); ctx is the caller's.
func (s *redisStore) decide(ctx context.Context, dl time.Time, c *call) (decision, error) {
	if s.batch != nil {
		return s.batch.decide(ctx, dl, c)
	}
	rctx, cancel := within(ctx, dl)
	defer cancel()
	return decideOne(rctx, s.rdb, c)
}

// parseReply checks and decodes one key's reply: flags (allowed, locked,
// limit index), remaining, delay (wait if allowed, retry if not), reset,
// next.
func parseReply(v []int64, p *plan) (decision, error) {
	flags := v[0]
	d := decision{
		allowed:   flags&1 == 1,
		locked:    flags&2 == 2,
		index:     int(flags >> 2),
		remaining: v[1],
		reset:     v[3],
		next:      v[4],
	}
	if d.allowed {
		d.wait = v[2]
	} else {
		d.retry = v[2]
	}
	if flags < 0 || d.index >= len(p.limits) || d.remaining < 0 || v[2] < 0 || d.reset < 0 || d.next < 0 ||
		(d.allowed && d.locked) || (!d.allowed && d.retry == 0) {
		return decision{}, fmt.Errorf("core: unexpected script reply %v", v)
	}
	return d, nil
}
