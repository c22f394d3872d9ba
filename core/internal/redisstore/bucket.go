package redisstore

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/model"
)

//go:embed bucket.lua
var bucketSrc string

// BucketLua is bucket.lua as Redis runs it (see expandLua).
var BucketLua = expandLua("bucket.lua", bucketSrc)

// BucketScript runs by EVALSHA; go-redis falls back to EVAL when Redis
// answers NOSCRIPT (after a restart or SCRIPT FLUSH). appendArgs builds its
// lone form of arguments, scriptArgs its batch form, and parseReply decodes
// one key's reply: see the layout table at the top of core/internal/redisstore/bucket.lua.
var BucketScript = redis.NewScript(BucketLua)

// ReplyWidth is the number of integers the script returns per key in its
// batch form (see the layout table at the top of
// core/internal/redisstore/bucket.lua).
const ReplyWidth = 5

// DebtWidth is the number of integers the script returns per key in its
// lone form: the key's flags and its debt (see parseDebt).
const DebtWidth = 2

// ReplyTime is the number of integers the script returns once per call,
// after its keys' replies and epochs: the instant the keys were decided
// at (see the layout table).
const ReplyTime = 1

// ErrKeyFailed is a key's answer in a batch when the script failed on that
// key alone (its reply flags are -1); the other keys of the batch have
// their answers.
var ErrKeyFailed = errors.New("core: the script failed on this key (is another program writing to it?)")

// Query is one decision asked of a store.
type Query struct {
	Key     string // the caller's key
	RKey    string // the stored name (see redisKey)
	Plan    *plan
	Cost    int64
	MaxWait int64       // microseconds; 0 unless reserving
	Penalty int64       // microseconds; 0 for none
	Now     int64       // the limiter's clock, microseconds: a calendar limit's windows are those around it
	keys    [1]string   // rkey, as a lone call's KEYS without an allocation; set once, as a call may be sent twice at once (see runApart)
	quota   *quotaEntry // a stepped key's quota entry (see quota.go); nil: none
	shadow  []Query     // the decisions of Plan.Shadow, one per shadow limit, sent in the same call (see setShadows); nil: none
	bctx    budgetCtx   // a lone send's budget as a deadline (see Store.submit): a query is on the heap anyway, so the context costs no allocation of its own
}

// setShadows gives c the decisions of its plan's shadow limits: each
// under its own plan, on the bucket rkey names by the plan's fingerprint,
// with c's cost and wait and no penalty (a shadow limit locks nothing).
// They travel in c's script call, as keys of the batch form after c's
// own, so a decision with shadow limits is still one call.
func (c *Query) setShadows(rkey func(fp string) string) {
	if len(c.Plan.Shadow) == 0 {
		return
	}
	c.shadow = make([]Query, len(c.Plan.Shadow))
	for i, sp := range c.Plan.Shadow {
		sc := &c.shadow[i]
		*sc = Query{Key: c.Key, Plan: sp, Cost: c.Cost, MaxWait: c.MaxWait, Now: c.Now}
		sc.RKey = rkey(sp.FP)
		sc.keys[0] = sc.RKey
	}
}

// width is the number of keys c decides in its call: its own and its
// shadow limits'.
func (c *Query) width() int { return 1 + len(c.shadow) }

// continuous reports whether c's plan is one continuous limit: the
// script answers it with its flags and debt (see parseDebt).
func (c *Query) continuous() bool { return len(c.Plan.Ticks) == 1 && !c.Plan.Stepped }

// parse decodes c's reply in the batch form from v, which starts at c's
// first integer: its own decision, with its shadow limits' folded in (see
// model.Decision.AddShadow). A shadow limit's bucket that failed alone
// (another program's value in its name) fails nothing: it is folded as a
// decision that denied nothing.
func (c *Query) parse(v []int64, d *decision) error {
	if err := c.parseKey(v[:ReplyWidth], d); err != nil {
		return err
	}
	for i := range c.shadow {
		at := ReplyWidth * (i + 1)
		var sd decision
		if c.shadow[i].parseKey(v[at:at+ReplyWidth], &sd) != nil {
			sd = decision{Allowed: true}
		}
		d.AddShadow(i, sd)
	}
	return nil
}

// parseKey decodes c's own ReplyWidth integers of the batch form: under
// one continuous limit its flags and debt (the others are 0), otherwise
// its five.
func (c *Query) parseKey(v []int64, d *decision) error {
	if c.continuous() {
		if v[2] != 0 || v[3] != 0 || v[4] != 0 {
			return badReply(v)
		}
		return c.parseDebt(v[:DebtWidth], d)
	}
	return parseReply(v, c.Plan, d)
}

// parseDebt decodes into d the two integers the script returns for c
// under one continuous limit (see the layout table at the top of
// core/internal/redisstore/bucket.lua): its flags and its debt before the
// decision. The rest of the decision follows from the debt and c's cost
// and wait, as in core's stepContinuous, so the script need not compute
// it or send it (three integers fewer per key, about 3k of Redis's
// instructions; bench/README.md). A reply the numbers contradict (an
// admission beyond the wait, a denial within it) does not decode; nor
// does a debt beyond [model.MaxExact] (no script writes one: every wait is
// bounded so that it stays below) or a lock longer than a time.Duration
// holds. Such numbers come from a value written by something else, a lock
// or an arrival centuries ahead, say: the key is then decided under the
// failure policy, with its cause logged, rather than answered with
// durations that overflow.
func (c *Query) parseDebt(v []int64, d *decision) error {
	v = v[:DebtWidth] // one bounds check, not one per value
	flags, debt := v[0], v[1]
	t := &c.Plan.Ticks[0]
	after := debt + c.Cost*t.P
	excess := after - t.Capacity() // the ticks after is over the capacity; negative: room left
	wait := t.Micros(excess)
	switch {
	case uint64(debt) > model.MaxExact: // negative too
		return badReply(v)
	case flags == 1 && excess <= c.MaxWait*t.R:
		*d = decision{Allowed: true, Wait: wait, Remaining: t.Left(after), Reset: t.Micros(after), Next: t.UnitWait(after)}
	case flags == 0 && excess > c.MaxWait*t.R:
		*d = decision{Retry: wait, Remaining: t.Left(debt), Reset: t.Micros(debt), Next: t.UnitWait(debt)}
	case flags&3 == 2 && flags > 2 && uint64(flags>>2) <= maxMicros:
		lock := flags >> 2
		*d = decision{Locked: true, Retry: max(wait, lock), Reset: t.Micros(debt), Next: max(t.UnitWait(debt), lock)}
	case flags == -1 && debt == 0:
		return ErrKeyFailed
	default:
		return badReply(v)
	}
	return nil
}

// lone returns the KEYS and arguments of a call that decides c alone
// (see loneKeys and loneArgs); with shadow limits, the batch form of c
// and its shadows, built once.
func (c *Query) lone() ([]string, []any) {
	if c.shadow != nil {
		return ScriptArgs([]*Query{c})
	}
	return c.loneKeys(), c.loneArgs()
}

// loneKeys returns the KEYS of a call that decides c alone, c without
// shadow limits (see lone): its bucket, and with a quota entry its tag's
// epoch key.
func (c *Query) loneKeys() []string {
	if c.quota == nil {
		return c.keys[:]
	}
	return []string{c.RKey, c.quota.ekey}
}

// decode checks and decodes into d the reply of a call that decided c
// alone.
func (c *Query) decode(vals []int64, d *decision) error {
	if c.shadow == nil && c.continuous() { // the lone form
		if len(vals) != DebtWidth+ReplyTime {
			return fmt.Errorf("%w of %d values for 1 key, want %d", errBadReply, len(vals), DebtWidth+ReplyTime)
		}
		if err := c.parseDebt(vals, d); err != nil {
			return err
		}
		d.At = vals[DebtWidth]
		return nil
	}
	want := ReplyWidth*c.width() + ReplyTime
	if c.quota != nil {
		want++
	}
	if len(vals) != want {
		return fmt.Errorf("%w of %d values for %d keys, want %d", errBadReply, len(vals), c.width(), want)
	}
	if err := c.parse(vals, d); err != nil {
		return err
	}
	if c.quota != nil {
		d.Epoch = vals[ReplyWidth*c.width()]
	}
	d.At = vals[len(vals)-1]
	return nil
}

// AppendGroup appends c's script arguments as one group of the batch form
// (see the layout table at the top of core/internal/redisstore/bucket.lua).
func (c *Query) AppendGroup(args []any) []any {
	args = append(args, strconv.FormatInt(c.Cost, 10), strconv.FormatInt(c.MaxWait, 10), strconv.FormatInt(c.Penalty, 10))
	if !c.Plan.Cal {
		return append(args, c.Plan.Args...)
	}
	// A calendar limit's arguments are its windows around the call's
	// clock; the others' are the plan's, in order.
	args = append(args, c.Plan.Args[0])
	at := 1
	for _, t := range c.Plan.Ticks {
		switch {
		case t.Calendar() != nil:
			args = append(args, t.St.Cal.Windows(c.Now, t.St.K, t.B).Args...)
		case t.Stepped():
			args = append(args, c.Plan.Args[at:at+4]...)
			at += 4
		default:
			args = append(args, c.Plan.Args[at:at+3]...)
			at += 3
		}
	}
	return args
}

// sameWindows reports whether c and o pass a calendar limit the same
// windows.
func (c *Query) sameWindows(o *Query) bool {
	for _, t := range c.Plan.Ticks {
		if cal := t.Calendar(); cal != nil && cal.Windows(c.Now, t.St.K, t.B).First != cal.Windows(o.Now, t.St.K, t.B).First {
			return false
		}
	}
	return true
}

// sameGroup reports whether c and o pass the script the same numbers, so
// that one group in a batch's arguments serves both.
func (c *Query) sameGroup(o *Query) bool {
	return c.Cost == o.Cost && c.MaxWait == o.MaxWait && c.Penalty == o.Penalty &&
		(c.Plan == o.Plan || c.Plan.FP == o.Plan.FP) && (!c.Plan.Cal || c.sameWindows(o))
}

// AppendArgs appends c's script arguments for a call that decides c alone:
// under one continuous limit the lone form, otherwise the batch form of
// one group (see the layout table at the top of core/internal/redisstore/bucket.lua).
func (c *Query) AppendArgs(args []any) []any {
	if c.shadow != nil {
		_, a := ScriptArgs([]*Query{c})
		return append(args, a...)
	}
	if len(c.Plan.Ticks) != 1 || c.Plan.Stepped {
		args = c.AppendGroup(append(args, "1"))
		if c.quota != nil {
			args = appendQuota(args, []int{1}, []*quotaEntry{c.quota})
		}
		return args
	}
	args = append(args, c.Plan.Args[1:4]...) // r, p, b
	switch {
	case c.Penalty != 0:
		return append(args, strconv.FormatInt(c.Cost, 10), strconv.FormatInt(c.MaxWait, 10), strconv.FormatInt(c.Penalty, 10))
	case c.MaxWait != 0:
		return append(args, strconv.FormatInt(c.Cost, 10), strconv.FormatInt(c.MaxWait, 10))
	case c.Cost != 1:
		return append(args, strconv.FormatInt(c.Cost, 10))
	}
	return args
}

// loneArgs returns c's script arguments for a call that decides c alone.
// For a plain Allow under one limit (the lone form with every trailing
// argument at its default) they are part of the plan's own arguments,
// shared and not to be modified; otherwise a new slice (see appendArgs).
func (c *Query) loneArgs() []any {
	if c.plain() {
		return c.Plan.Args[1:4:4]
	}
	return c.AppendArgs(make([]any, 0, 4+len(c.Plan.Args)))
}

// plain reports whether c is a plain Allow under one limit: its lone
// form is its bucket and part of the plan's own arguments (see loneArgs),
// every trailing argument at its default.
func (c *Query) plain() bool {
	return len(c.Plan.Ticks) == 1 && !c.Plan.Stepped && c.Cost == 1 && c.MaxWait == 0 && c.Penalty == 0 && c.shadow == nil && c.quota == nil
}

// ScriptArgs returns the keys and script arguments that decide calls in
// order in one script call: each call's key, then its shadow limits' (see
// setShadows). Calls that all pass the same numbers under one continuous
// limit, the usual batch, travel in the lone form with several keys (see
// sharedLimit); any others in the batch form, where keys with the same
// numbers share a group, so that the script parses them once (see the
// layout table at the top of core/internal/redisstore/bucket.lua).
func ScriptArgs(calls []*Query) ([]string, []any) {
	if sharedLimit(calls) {
		keys := make([]string, len(calls))
		for i, c := range calls {
			keys[i] = c.RKey
		}
		return keys, calls[0].loneArgs()
	}
	b := scriptArgs{keys: make([]string, 0, len(calls)), args: make([]any, 1, 8)}
	var quotas []*quotaEntry
	var quotaAt []int // each quota entry's key, 1-based
	for _, c := range calls {
		if c.quota != nil {
			quotas, quotaAt = append(quotas, c.quota), append(quotaAt, len(b.keys)+1)
		}
		b.add(c)
		for i := range c.shadow {
			b.add(&c.shadow[i])
		}
	}
	b.args[0] = strconv.Itoa(len(b.heads))
	keys, args := b.keys, b.args
	if quotas != nil {
		args = appendQuota(args, quotaAt, quotas)
		for _, q := range quotas {
			keys = append(keys, q.ekey)
		}
	}
	for _, g := range b.groups {
		args = append(args, strconv.Itoa(g))
	}
	return keys, args
}

// sharedLimit reports whether calls can travel in bucket.lua's lone form
// with several keys: each under one continuous limit, with the same cost,
// wait and penalty as the first, without shadow limits or a quota entry.
// That form is five arguments shorter than the batch form's one group,
// and the script parses no group (about 2.7k of Redis's instructions fewer
// per key at two keys a call; bench/README.md).
func sharedLimit(calls []*Query) bool {
	if len(calls) == 0 {
		return false
	}
	c := calls[0]
	if len(c.Plan.Ticks) != 1 || c.Plan.Stepped || c.shadow != nil || c.quota != nil {
		return false
	}
	for _, o := range calls[1:] {
		if o.shadow != nil || o.quota != nil || !c.sameGroup(o) {
			return false
		}
	}
	return true
}

// scriptArgs builds a call's batch form, a key at a time (see
// ScriptArgs).
type scriptArgs struct {
	keys   []string
	args   []any
	heads  []*Query // the first call of each group
	groups []int    // each key's group, 1-based; needed with more than one
}

// add appends c's key, and its group's numbers if no group before has
// them.
func (b *scriptArgs) add(c *Query) {
	i := len(b.keys)
	b.keys = append(b.keys, c.RKey)
	g := 0
	for j, h := range b.heads {
		if h.sameGroup(c) {
			g = j + 1
			break
		}
	}
	if g == 0 {
		b.heads = append(b.heads, c)
		g = len(b.heads)
		b.args = c.AppendGroup(b.args)
		if g == 2 {
			b.groups = make([]int, i)
			for j := range b.groups {
				b.groups[j] = 1
			}
		}
	}
	if b.groups != nil {
		b.groups = append(b.groups, g)
	}
}

// ParseReply checks and decodes one key's five integers into a decision:
// those of a key under several limits or stepped ones in bucket.lua's
// batch form (see the layout table at the top of
// core/internal/redisstore/bucket.lua), and the replies of the scripts
// that answer a decision as it does (lease.lua, settle.lua). Durations
// beyond a time.Duration's range do not decode (see maxMicros).
func ParseReply(v []int64, p *plan) (decision, error) {
	var d decision
	err := parseReply(v, p, &d)
	return d, err
}

// parseReply is ParseReply into d, which it sets only on success (the
// engine's decisions are filled in place, not copied up each layer).
func parseReply(v []int64, p *plan, d *decision) error {
	v = v[:ReplyWidth] // one bounds check, not one per value
	flags := v[0]
	if flags == -1 && v[1] == 0 && v[2] == 0 && v[3] == 0 && v[4] == 0 {
		return ErrKeyFailed
	}
	allowed, locked, index := flags&1 == 1, flags&2 == 2, int(flags>>2)
	if flags < 0 || index >= len(p.Ticks) || v[1] < 0 || uint64(v[2]) > maxMicros || uint64(v[3]) > maxMicros || uint64(v[4]) > maxMicros ||
		(allowed && locked) || (!allowed && v[2] == 0) {
		return badReply(v)
	}
	*d = decision{Allowed: allowed, Locked: locked, Index: index, Remaining: v[1], Reset: v[3], Next: v[4]}
	if allowed {
		d.Wait = v[2]
	} else {
		d.Retry = v[2]
	}
	return nil
}

// maxMicros is the longest time.Duration in microseconds (about 292
// years): a reply's durations beyond it (a lock or an arrival centuries
// ahead, from a value no script writes) do not decode.
const maxMicros = math.MaxInt64 / uint64(time.Microsecond)

// badReply is the error of a reply v that does not decode. Out of line:
// built in its caller, its code sat between the checks and the decoding,
// and cost every decision code lines it never runs (clientcost -cold).
//
//go:noinline
func badReply(v []int64) error {
	// Formatted as a copy: v may be a caller's buffer on its stack,
	// which passing it to Errorf would move to the heap on every call.
	return fmt.Errorf("%w %v", errBadReply, slices.Clone(v))
}
