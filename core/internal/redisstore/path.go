package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/batch"
)

//go:embed path.lua
var pathSrc string

// PathLua is path.lua as Redis runs it (see expandLua).
var PathLua = expandLua("path.lua", pathSrc)

// PathScript decides a path of keys as one (see the layout table at the
// top of core/internal/redisstore/path.lua).
var PathScript = redis.NewScript(PathLua)

// PathReplyWidth is the number of integers path.lua returns.
const PathReplyWidth = 6

// submitPath decides c on node n, as submit decides a key's call: batched
// with the node's other paths when it has a batcher, else alone under ctx
// bounded by budget, or apart from the caller for a client that ignores
// deadlines.
func (s *Store) submitPath(ctx context.Context, n *node, c *PathQuery, budget time.Duration) (PathAnswer, time.Duration, error) {
	if n.paths != nil && !s.sentAlone(budget) {
		return n.paths.Do(ctx, c)
	}
	start := time.Now()
	if s.detached {
		a, err := runApart(ctx, budget, func(rctx context.Context) (PathAnswer, error) { return evalPath(rctx, s.rdb, c) })
		return a, time.Since(start), err
	}
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if budget > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > budget {
			rctx, cancel = context.WithTimeout(ctx, budget)
		}
	}
	a, err := evalPath(rctx, s.rdb, c)
	cancel()
	return a, time.Since(start), err
}

// evalPath decides c alone, in path.lua's lone form.
func evalPath(ctx context.Context, rdb redis.Scripter, c *PathQuery) (PathAnswer, error) {
	return pathForm.one(ctx, rdb, c)
}

// pathForm is how paths travel: path.lua's lone form for one, its batch
// form for several in one call, grouped by the root's hash tag (see form).
var pathForm = &form[*PathQuery, PathAnswer]{
	script: func([]*batch.Member[*PathQuery, PathAnswer]) *redis.Script { return PathScript },
	tag:    func(c *PathQuery) string { return c.RKeys[0] },
	lone:   func(c *PathQuery) ([]string, []any) { return c.RKeys, c.Args },
	many:   pathBatchArgs,
	decode: func(g []*batch.Member[*PathQuery, PathAnswer], vals []int64, err error) {
		if len(g) == 1 && err == nil {
			g[0].Res, err = g[0].Req.decode(vals)
		}
		if len(g) == 1 {
			g[0].Err = err
			return
		}
		deliverPaths(g, vals, err)
	},
}

// ShareKeys returns the names of a shared level's records (see the share
// section of path.lua's layout table): the parent's, beside the level's
// bucket rkeys[level], and the child's, beside the child level's bucket,
// or for a path that stops at the shared level, beside the parent's.
func ShareKeys(rkeys []string, level int) (parent, child string) {
	parent = rkeys[level] + "~fair"
	if level+1 < len(rkeys) {
		return parent, rkeys[level+1] + "~fair"
	}
	return parent, parent + "~"
}

// AppendShare appends a's share section (path.lua's layout table) to args.
func AppendShare(args []any, a *shareAsk) []any {
	fair := "0"
	if a.Fair {
		fair = "1"
	}
	return append(args, strconv.Itoa(a.Level+1), fair, strconv.FormatInt(a.Weight, 10), strconv.FormatInt(a.Window, 10), strconv.FormatInt(a.Contend, 10), strconv.FormatInt(a.Floor, 10), "s")
}

// pathBatchArgs returns the keys and arguments of path.lua's batch form
// deciding members in order.
func pathBatchArgs(members []*batch.Member[*PathQuery, PathAnswer]) ([]string, []any) {
	var keys []string
	args := []any{"0", strconv.Itoa(len(members))}
	for _, m := range members {
		keys = append(keys, m.Req.RKeys...)
		args = append(args, strconv.Itoa(len(m.Req.Args)))
		args = append(args, m.Req.Args...)
	}
	return keys, args
}

// deliverPaths decodes a batch-form reply for members, or gives them its
// error; each path's reply is checked on its own.
func deliverPaths(members []*batch.Member[*PathQuery, PathAnswer], vals []int64, err error) {
	quotas := 0 // the epochs of the paths with a quota section follow the paths' replies
	for _, m := range members {
		if m.Req.quota {
			quotas++
		}
	}
	if err == nil && len(vals) != PathReplyWidth*len(members)+quotas+ReplyTime {
		err = fmt.Errorf("%w of %d values for %d paths", errBadReply, len(vals), len(members))
	}
	q := PathReplyWidth * len(members)
	for i, m := range members {
		var epoch int64
		if err == nil && m.Req.quota {
			epoch = vals[q]
			q++
		}
		if err != nil {
			m.Err = err
			continue
		}
		v := vals[i*PathReplyWidth : (i+1)*PathReplyWidth]
		if v[0] == -1 && v[1] == 0 && v[2] == 0 && v[3] == 0 && v[4] == 0 && v[5] == 0 {
			m.Err = ErrKeyFailed
			continue
		}
		m.Res, m.Err = parsePathAnswer(v, m.Req.Plans)
		m.Res.Epoch = epoch
		if m.Err == nil {
			m.Res.D.At = vals[len(vals)-1]
		}
	}
}

// sendPaths returns the sender of a node's paths: with split (a Cluster
// master or Ring shard) one script call per root's hash tag, pipelined;
// else one call.
func (s *Store) sendPaths(split bool, pipeline func() redis.Pipeliner) batch.Sender[*PathQuery, PathAnswer] {
	return pathForm.sender(s.rdb, split, pipeline)
}

// PathQuery is one path decision asked of Redis: its stored names, root
// first (then a shared level's records, then a quota's epoch key), and its
// arguments in path.lua's lone form.
type PathQuery struct {
	RKeys []string // with a quota section, the root tag's epoch key last
	Args  []any
	Plans []*plan // each level's, to decode the reply
	quota bool    // Args end with a quota section (see quota.go)
}

// decode checks and decodes the reply of a call that decided c alone.
func (c *PathQuery) decode(vals []int64) (PathAnswer, error) {
	want := PathReplyWidth + ReplyTime
	if c.quota {
		want++
	}
	if len(vals) != want {
		return PathAnswer{}, fmt.Errorf("%w of %d values, want %d", errBadReply, len(vals), want)
	}
	a, err := parsePathAnswer(vals[:PathReplyWidth], c.Plans)
	if c.quota {
		a.Epoch = vals[PathReplyWidth]
	}
	if err == nil {
		a.D.At = vals[len(vals)-1]
	}
	return a, err
}

// PathAnswer is a path's decision and its deciding level.
type PathAnswer struct {
	D       decision
	Level   int
	Foreign int   // 1-based: the level whose value of another type was deleted; 0: none
	Epoch   int64 // with a quota section, the root tag's epoch as read
}

// ParsePathReply checks and decodes path.lua's reply (see its layout
// table) for a path under plans.
func ParsePathReply(v []int64, plans []*plan) (decision, int, error) {
	a, err := parsePathAnswer(v, plans)
	return a.D, a.Level, err
}

// parsePathAnswer is parsePathReply with the level whose value of another
// type the script deleted, if any.
func parsePathAnswer(v []int64, plans []*plan) (PathAnswer, error) {
	if len(v) != PathReplyWidth {
		return PathAnswer{}, fmt.Errorf("%w of %d values, want %d", errBadReply, len(v), PathReplyWidth)
	}
	lv, foreign, reason := int(v[5]%16), int(v[5]/16%16), int(v[5]/256)
	if v[5] < 0 || lv >= len(plans) || foreign > len(plans) || reason > 2 || reason > 0 && v[0]&1 == 1 {
		return PathAnswer{}, fmt.Errorf("%w %v", errBadReply, v)
	}
	a := PathAnswer{Level: lv, Foreign: foreign}
	err := parseReply(v[:ReplyWidth], plans[lv], &a.D)
	a.D.Reason = reason
	return a, err
}
