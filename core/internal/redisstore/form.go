package redisstore

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/batch"
)

// form is how the requests of one kind of operation travel as script
// calls: which script a call runs, its arguments for one request alone (the
// lone form) and for several in one call (the batch form, if the script has
// one), and how one call's reply is decoded for the requests it carried.
// Every batcher of the store sends through [form.sender], so a batch is
// split, pipelined and sent again after NOSCRIPT in one place.
type form[Req, Res any] struct {
	// script is the script a call of group runs.
	script func(group []*batch.Member[Req, Res]) *redis.Script
	// tag returns the stored name whose hash tag a request's keys share:
	// on a Cluster master or Ring shard, requests of one tag share a
	// call. Nil: every request is a call of its own (no batch form).
	tag func(Req) string
	// lone returns the keys and arguments of one request alone.
	lone func(Req) ([]string, []any)
	// many returns those of several requests in one call; nil when the
	// script has no batch form.
	many func([]*batch.Member[Req, Res]) ([]string, []any)
	// decode sets Res or Err of every member of group from the integers
	// of its call's reply, or from the call's error.
	decode func(group []*batch.Member[Req, Res], vals []int64, err error)
	// single: the lone form's reply is one integer (vals holds it), not
	// a list; the batch form's is a list all the same.
	single bool
}

// args returns the keys and arguments of one call carrying group.
func (f *form[Req, Res]) args(group []*batch.Member[Req, Res]) ([]string, []any) {
	if len(group) == 1 || f.many == nil {
		return f.lone(group[0].Req)
	}
	return f.many(group)
}

// run sends group in one call: EVALSHA, and EVAL after NOSCRIPT.
func (f *form[Req, Res]) run(ctx context.Context, rdb redis.Scripter, group []*batch.Member[Req, Res]) {
	keys, args := f.args(group)
	vals, err := RunInts(ctx, rdb, f.script(group), keys, args, f.single && len(group) == 1)
	f.decode(group, vals, err)
}

// one sends r alone, in the lone form, and returns its answer.
func (f *form[Req, Res]) one(ctx context.Context, rdb redis.Scripter, r Req) (Res, error) {
	m := batch.Member[Req, Res]{Req: r}
	f.run(ctx, rdb, []*batch.Member[Req, Res]{&m})
	return m.Res, m.Err
}

// groups splits members into calls: all in one when split is false and
// the script has a batch form; otherwise by hash tag (a script's keys
// must share a slot), or one call each without a batch form; in the order
// of each call's first member.
func (f *form[Req, Res]) groups(members []*batch.Member[Req, Res], split bool) [][]*batch.Member[Req, Res] {
	switch {
	case len(members) == 1 || (!split && f.many != nil):
		return [][]*batch.Member[Req, Res]{members}
	case f.tag == nil || f.many == nil:
		groups := make([][]*batch.Member[Req, Res], len(members))
		for i := range members {
			groups[i] = members[i : i+1 : i+1]
		}
		return groups
	}
	return groupByTag(members, f.tag)
}

// sender returns the batch sender of f on rdb: one call for the batch, or,
// with split (a Cluster master or Ring shard, where a script's keys must
// share a slot) or without a batch form, one call per group, all in one
// pipeline (a Cluster client sends it to the node's master). Groups that
// Redis answers NOSCRIPT (after a restart) are sent again in one pipeline
// of EVAL.
func (f *form[Req, Res]) sender(rdb redis.Scripter, split bool, pipeline func() redis.Pipeliner) batch.Sender[Req, Res] {
	return func(ctx context.Context, members []*batch.Member[Req, Res]) {
		if len(members) == 1 || (!split && f.many != nil) {
			f.run(ctx, rdb, members)
			return
		}
		f.send(ctx, rdb, f.groups(members, split), pipeline)
	}
}

// send sends groups, one call each: one group alone, several in one
// pipeline of EVALSHA (or, with a nil pipeline, one after another), and
// those Redis answered NOSCRIPT (after a restart) again in one pipeline of
// EVAL.
func (f *form[Req, Res]) send(ctx context.Context, rdb redis.Scripter, groups [][]*batch.Member[Req, Res], pipeline func() redis.Pipeliner) {
	if len(groups) == 1 || pipeline == nil {
		for _, g := range groups {
			f.run(ctx, rdb, g)
		}
		return
	}
	pipe := pipeline()
	cmds := make([]*redis.Cmd, len(groups))
	for i, g := range groups {
		keys, args := f.args(g)
		cmds[i] = f.script(g).EvalSha(ctx, pipe, keys, args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	var again []int
	for i, g := range groups {
		if err := cmds[i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, i)
			continue
		}
		vals, err := cmdInts(cmds[i], f.single && len(g) == 1)
		f.decode(g, vals, err)
	}
	switch len(again) {
	case 0:
		return
	case 1:
		f.run(ctx, rdb, groups[again[0]])
		return
	}
	pipe = pipeline()
	for _, i := range again {
		keys, args := f.args(groups[i])
		cmds[i] = f.script(groups[i]).Eval(ctx, pipe, keys, args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, i := range again {
		vals, err := cmdInts(cmds[i], f.single && len(groups[i]) == 1)
		f.decode(groups[i], vals, err)
	}
}

// processor is a client that sends any command: every go-redis client,
// pipeline and connection is one.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// RunInts sends one call of sc (EVALSHA, and EVAL after NOSCRIPT) whose
// reply is a list of integers, or with single one integer, and returns
// them. Through a processor the reply is read as integers straight off the
// wire (an IntSliceCmd or IntCmd) rather than as a list of interface values
// converted after: a lone decision makes six allocations fewer, and the
// command's arguments are the same as [redis.Script.Run] sends, so hooks
// and tracing see the same command.
func RunInts(ctx context.Context, rdb redis.Scripter, sc *redis.Script, keys []string, args []any, single bool) ([]int64, error) {
	p, _ := rdb.(processor)
	return runInts(ctx, p, rdb, sc, keys, args, single)
}

// runInts is RunInts with rdb's processor found already (nil if it has
// none): a lone decision's store keeps it (see Store.proc).
func runInts(ctx context.Context, p processor, rdb redis.Scripter, sc *redis.Script, keys []string, args []any, single bool) ([]int64, error) {
	if p == nil {
		return runScript(ctx, rdb, sc, keys, args, single)
	}
	argv := make([]any, 3+len(keys)+len(args))
	argv[0], argv[1] = "evalsha", hashOf(sc)
	if n := len(keys); n < len(smallInts) {
		argv[2] = smallInts[n] // boxed once, not on every call
	} else {
		argv[2] = n
	}
	for i, k := range keys {
		argv[3+i] = k
	}
	for i, a := range args { // not copy: its call costs more for a few
		argv[3+len(keys)+i] = a
	}
	return processInts(ctx, p, rdb, sc, keys, args, argv, single)
}

// processInts sends argv, the EVALSHA of sc with keys and args, through p
// and reads its reply as runInts does: runInts's second half.
func processInts(ctx context.Context, p processor, rdb redis.Scripter, sc *redis.Script, keys []string, args []any, argv []any, single bool) ([]int64, error) {
	var vals []int64
	var err error
	if single {
		vals, err = processInt(ctx, p, argv, len(keys) > 0)
	} else {
		vals, err = processList(ctx, p, argv, len(keys) > 0)
	}
	if err != nil && noScript(err) {
		return evalScript(ctx, rdb, sc, keys, args, single)
	}
	return vals, err
}

// processList sends argv through p as a command whose reply is a list of
// integers, read as integers straight off the wire (see RunInts); keyed
// says argv[3] is its first key (a Cluster client routes by it). A plain
// decision calls it with its own argv (see Store.sendPlain), and sends
// its script whole if Redis does not have it (noScript).
func processList(ctx context.Context, p processor, argv []any, keyed bool) ([]int64, error) {
	cmd := redis.NewIntSliceCmd(ctx, argv...)
	if keyed {
		cmd.SetFirstKeyPos(3)
	}
	_ = p.Process(ctx, cmd)
	return cmd.Result()
}

// noScript reports whether err is Redis's answer to an EVALSHA of a
// script it does not have.
func noScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// The rare turns of runInts, out of line: built in it, their calls sat
// between the steps every call takes and cost each decision code lines
// it never runs (clientcost -cold).

// runScript runs sc through a client without a processor.
//
//go:noinline
func runScript(ctx context.Context, rdb redis.Scripter, sc *redis.Script, keys []string, args []any, single bool) ([]int64, error) {
	return cmdInts(sc.Run(ctx, rdb, keys, args...), single)
}

// evalScript sends sc whole, after Redis said it did not have it.
//
//go:noinline
func evalScript(ctx context.Context, rdb redis.Scripter, sc *redis.Script, keys []string, args []any, single bool) ([]int64, error) {
	return cmdInts(sc.Eval(ctx, rdb, keys, args...), single)
}

// processInt sends argv through p as a command whose reply is one
// integer, returned as a list of one; keyed says argv[3] is its first key
// (for a Cluster client's routing).
func processInt(ctx context.Context, p processor, argv []any, keyed bool) ([]int64, error) {
	cmd := redis.NewIntCmd(ctx, argv...)
	if keyed {
		cmd.SetFirstKeyPos(3)
	}
	_ = p.Process(ctx, cmd)
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	return []int64{v}, nil
}

// cmdInts decodes cmd's reply, a list of integers or with single one
// integer.
func cmdInts(cmd *redis.Cmd, single bool) ([]int64, error) {
	if single {
		v, err := cmd.Int64()
		if err != nil {
			return nil, err
		}
		return []int64{v}, nil
	}
	return cmd.Int64Slice()
}

// hashes holds each script's SHA1 as an interface value, boxed once
// rather than on every call (see hashOf).
var hashes sync.Map // *redis.Script -> any (its Hash)

// smallInts are the key counts of most calls, boxed.
var smallInts = [...]any{0, 1, 2, 3, 4, 5, 6, 7, 8}

// bucketHash is BucketScript's SHA1, boxed.
var bucketHash any = BucketScript.Hash()

// hashOf returns sc's SHA1, as EVALSHA's argument.
func hashOf(sc *redis.Script) any {
	if sc == BucketScript { // a decision's, inlined, without a sync.Map's code
		return bucketHash
	}
	return hashOfOther(sc)
}

// hashOfOther is hashOf for a script other than BucketScript.
func hashOfOther(sc *redis.Script) any {
	if h, ok := hashes.Load(sc); ok {
		return h
	}
	h, _ := hashes.LoadOrStore(sc, any(sc.Hash()))
	return h
}
