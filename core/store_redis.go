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
const replyWidth = 8

// call is one decision asked of a store.
type call struct {
	key     string // the caller's key
	rkey    string // the stored name (see redisKey)
	plan    *plan
	cost    int64
	maxWait int64 // microseconds; 0 unless reserving
	penalty int64 // microseconds; 0 for none
}

// appendArgs appends c's script arguments to args.
func (c *call) appendArgs(args []any) []any {
	args = append(args, strconv.FormatInt(c.cost, 10), strconv.FormatInt(c.maxWait, 10), strconv.FormatInt(c.penalty, 10))
	return append(args, c.plan.args...)
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

func (s *redisStore) decide(ctx context.Context, c *call) (decision, error) {
	if s.batch != nil {
		return s.batch.decide(ctx, c)
	}
	return decideOne(ctx, s.rdb, c)
}

// parseReply checks and decodes one key's reply.
func parseReply(v []int64, p *plan) (decision, error) {
	d := decision{
		allowed:   v[0] == 1,
		remaining: v[1],
		retry:     v[2],
		reset:     v[3],
		wait:      v[4],
		index:     int(v[5]),
		locked:    v[6] == 1,
		next:      v[7],
	}
	if v[0]|v[6] > 1 || v[0] < 0 || v[6] < 0 || d.remaining < 0 || d.retry < 0 || d.reset < 0 || d.wait < 0 || d.next < 0 ||
		d.index < 0 || d.index >= len(p.limits) || (d.allowed && d.retry != 0) || (!d.allowed && d.retry == 0) {
		return decision{}, fmt.Errorf("core: unexpected script reply %v", v)
	}
	return d, nil
}
