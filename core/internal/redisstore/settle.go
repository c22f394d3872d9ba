package redisstore

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

// SettleLua is settle.lua as Redis runs it (see expandLua).
var SettleLua = expandLua("settle.lua", settleSrc)

// SettleScript applies a settled reservation's difference to its buckets
// once (see the layout table at the top of core/internal/redisstore/settle.lua).
var SettleScript = redis.NewScript(SettleLua)

// settleOne runs c alone, in the lone form, and reports whether it was
// applied.
func settleOne(ctx context.Context, rdb redis.Scripter, c *SettleQuery) (bool, error) {
	return settleForm.one(ctx, rdb, c)
}

// settleForm is how settlements travel: settle.lua's lone form for one,
// its batch form for several in one call (see form).
var settleForm = &form[*SettleQuery, bool]{
	script: func([]*batch.Member[*SettleQuery, bool]) *redis.Script { return SettleScript },
	tag:    func(c *SettleQuery) string { return c.Keys[0] },
	lone:   func(c *SettleQuery) ([]string, []any) { return c.Keys[:], c.loneArgs() },
	many:   settleArgs,
	single: true,
	decode: func(g []*batch.Member[*SettleQuery, bool], vals []int64, err error) {
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
func (s *Store) sendSettles(split bool, pipeline func() redis.Pipeliner) batch.Sender[*SettleQuery, bool] {
	return settleForm.sender(s.rdb, split, pipeline)
}

// settleArgs returns the keys and arguments, in the batch form, that apply
// members' settlements in order in one script call. Settlements under the
// same limits share a group, parsed once by the script.
func settleArgs(members []*batch.Member[*SettleQuery, bool]) ([]string, []any) {
	keys := make([]string, 0, 2*len(members))
	args := make([]any, 1, 8+3*len(members))
	var heads []*plan // each group's limits
	each := make([]any, 0, 3*len(members))
	for _, m := range members {
		c := m.Req
		keys = append(keys, c.Keys[0], c.Keys[1])
		g := 0
		for j, h := range heads {
			if !c.Plan.Stepped && (h == c.Plan || h.FP == c.Plan.FP) { // a stepped plan's arguments are the settlement's
				g = j + 1
				break
			}
		}
		if g == 0 {
			heads = append(heads, c.Plan)
			g = len(heads)
			args = append(args, c.limitArgs()...)
		}
		each = append(each, strconv.FormatInt(c.Delta, 10), strconv.FormatInt(c.Marker, 10), strconv.Itoa(g))
	}
	args[0] = strconv.Itoa(len(heads))
	return keys, append(args, each...)
}

// deliverSettled decodes one batch-form reply for members, or gives them
// its error. Each settlement's reply is checked on its own: one that
// failed (-1) or makes no sense fails only its member.
func deliverSettled(members []*batch.Member[*SettleQuery, bool], vals []int64, err error) {
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
			m.Err = ErrKeyFailed
		default:
			m.Err = fmt.Errorf("core: unexpected settle reply %d", vals[i])
		}
	}
}

// SettleQuery is one settlement asked of Redis: the settle script's
// numbers for one reservation (see the layout table at the top of
// core/internal/redisstore/settle.lua).
type SettleQuery struct {
	Keys   [2]string // the bucket (see RedisKey) and the marker (see MarkerKey)
	Delta  int64     // events: final cost less reserved cost
	Marker int64     // milliseconds the marker is kept
	Plan   *plan     // the limits, for grouping
	args   []any     // the limits as arguments (see settleLimitArgs); nil: Plan.Args
}

// loneArgs returns c's arguments in the lone form.
func (c *SettleQuery) loneArgs() []any {
	args := make([]any, 0, 2+len(c.limitArgs()))
	args = append(args, strconv.FormatInt(c.Delta, 10), strconv.FormatInt(c.Marker, 10))
	return append(args, c.limitArgs()...)
}

// settleLimitArgs returns plan p's limits as the settle script's
// arguments (see the layout table at the top of core/internal/redisstore/settle.lua) for a
// settlement at now (the limiter's clock) of a reservation made elapsed
// microseconds before: for continuous limits the plan's own, shared and
// not to be modified; a stepped limit's are its decision's (bucket.lua's
// layout, a calendar's windows around now) and the elapsed time, from
// which the script finds the reservation's window on Redis's clock.
func settleLimitArgs(p *plan, now, elapsed int64) []any {
	if !p.Stepped {
		return p.Args
	}
	el := strconv.FormatInt(max(0, elapsed), 10)
	args := make([]any, 0, len(p.Args)+10*len(p.Ticks))
	args = append(args, p.Args[0])
	at := 1
	for _, t := range p.Ticks {
		switch {
		case t.Calendar() != nil:
			args = append(args, t.St.Cal.Windows(now, t.St.K, t.B).Args...)
			args = append(args, el)
		case t.Stepped():
			args = append(args, p.Args[at:at+4]...)
			args = append(args, el)
			at += 4
		default:
			args = append(args, p.Args[at:at+3]...)
			at += 3
		}
	}
	return args
}

// limitArgs returns c's limits as the settle script's arguments: c.args,
// or for a settlement made without them, its plan's.
func (c *SettleQuery) limitArgs() []any {
	if c.args == nil {
		return c.Plan.Args
	}
	return c.args
}
