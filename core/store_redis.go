package core

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

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

// redisStore decides in Redis through the bucket script.
type redisStore struct {
	rdb redis.Scripter
}

func (s *redisStore) decide(ctx context.Context, c *call) (decision, error) {
	args := c.appendArgs(make([]any, 0, 3+len(c.plan.args)))
	vals, err := bucketScript.Run(ctx, s.rdb, []string{c.rkey}, args...).Int64Slice()
	if err != nil {
		return decision{}, err
	}
	if len(vals) != replyWidth {
		return decision{}, fmt.Errorf("core: unexpected script reply of %d values, want %d", len(vals), replyWidth)
	}
	return parseReply(vals, c.plan)
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
