package core

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/batch"
)

//go:embed settle.lua
var settleSrc string

// settleLua is settle.lua as Redis runs it (see expandLua).
var settleLua = expandLua("settle.lua", settleSrc)

// settleScript applies a settled reservation's difference to its buckets
// once (see the layout table at the top of core/settle.lua).
var settleScript = redis.NewScript(settleLua)

// settleOne runs c alone, in the lone form, and reports whether it was
// applied.
func settleOne(ctx context.Context, rdb redis.Scripter, c *settleCall) (bool, error) {
	return settleForm.one(ctx, rdb, c)
}

// settleForm is how settlements travel: settle.lua's lone form for one,
// its batch form for several in one call (see form).
var settleForm = &form[*settleCall, bool]{
	script: func([]*batch.Member[*settleCall, bool]) *redis.Script { return settleScript },
	tag:    func(c *settleCall) string { return c.keys[0] },
	lone:   func(c *settleCall) ([]string, []any) { return c.keys[:], c.loneArgs() },
	many:   settleArgs,
	single: true,
	decode: func(g []*batch.Member[*settleCall, bool], vals []int64, err error) {
		if len(g) == 1 {
			g[0].Res, g[0].Err = err == nil && vals[0] == 1, err
			return
		}
		deliverSettled(g, vals, err)
	},
}

// sendSettles returns the sender of a node's settlements: with split (a
// Cluster master or Ring shard) one script call per hash tag, pipelined;
// else one call. Settlements are not waited on by [WithReplicaAck], as
// they never were.
func (s *redisStore) sendSettles(split bool, pipeline func() redis.Pipeliner) batch.Sender[*settleCall, bool] {
	return settleForm.sender(s.rdb, split, pipeline)
}

// settleArgs returns the keys and arguments, in the batch form, that apply
// members' settlements in order in one script call. Settlements under the
// same limits share a group, parsed once by the script.
func settleArgs(members []*batch.Member[*settleCall, bool]) ([]string, []any) {
	keys := make([]string, 0, 2*len(members))
	args := make([]any, 1, 8+3*len(members))
	var heads []*plan // each group's limits
	each := make([]any, 0, 3*len(members))
	for _, m := range members {
		c := m.Req
		keys = append(keys, c.keys[0], c.keys[1])
		g := 0
		for j, h := range heads {
			if !c.plan.stepped && (h == c.plan || h.fp == c.plan.fp) { // a stepped plan's arguments are the settlement's
				g = j + 1
				break
			}
		}
		if g == 0 {
			heads = append(heads, c.plan)
			g = len(heads)
			args = append(args, c.limitArgs()...)
		}
		each = append(each, strconv.FormatInt(c.delta, 10), strconv.FormatInt(c.marker, 10), strconv.Itoa(g))
	}
	args[0] = strconv.Itoa(len(heads))
	return keys, append(args, each...)
}

// deliverSettled decodes one batch-form reply for members, or gives them
// its error. Each settlement's reply is checked on its own: one that
// failed (-1) or makes no sense fails only its member.
func deliverSettled(members []*batch.Member[*settleCall, bool], vals []int64, err error) {
	if err == nil && len(vals) != len(members) {
		err = fmt.Errorf("core: unexpected settle reply of %d values for %d settlements", len(vals), len(members))
	}
	for i, m := range members {
		switch {
		case err != nil:
			m.Err = err
		case vals[i] == 1 || vals[i] == 0:
			m.Res = vals[i] == 1
		case vals[i] == -1:
			m.Err = errKeyFailed
		default:
			m.Err = fmt.Errorf("core: unexpected settle reply %d", vals[i])
		}
	}
}

// settleCall is one settlement asked of Redis: the settle script's
// numbers for one reservation (see the layout table at the top of
// core/settle.lua).
type settleCall struct {
	keys   [2]string // the bucket (see redisKey) and the marker (see markerKey)
	delta  int64     // events: final cost less reserved cost
	marker int64     // milliseconds the marker is kept
	plan   *plan     // the limits, for grouping
	args   []any     // the limits as arguments (see settleLimitArgs); nil: plan.args
}

// loneArgs returns c's arguments in the lone form.
func (c *settleCall) loneArgs() []any {
	args := make([]any, 0, 2+len(c.limitArgs()))
	args = append(args, strconv.FormatInt(c.delta, 10), strconv.FormatInt(c.marker, 10))
	return append(args, c.limitArgs()...)
}
