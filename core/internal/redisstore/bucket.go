package redisstore

import (
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
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

// ReplyWidth is the number of integers the script returns per key (see the
// layout table at the top of core/internal/redisstore/bucket.lua).
const ReplyWidth = 5

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
}

// loneKeys returns the KEYS of a call that decides c alone: its bucket,
// and with a quota entry its tag's epoch key.
func (c *Query) loneKeys() []string {
	if c.quota == nil {
		return c.keys[:]
	}
	return []string{c.RKey, c.quota.ekey}
}

// decode checks and decodes the reply of a call that decided c alone.
func (c *Query) decode(vals []int64) (decision, error) {
	want := ReplyWidth + ReplyTime
	if c.quota != nil {
		want++
	}
	if len(vals) != want {
		return decision{}, fmt.Errorf("%w of %d values for one key, want %d", errBadReply, len(vals), want)
	}
	d, err := ParseReply(vals[:ReplyWidth], c.Plan)
	if c.quota != nil {
		d.Epoch = vals[ReplyWidth]
	}
	if err == nil {
		d.At = vals[len(vals)-1]
	}
	return d, err
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
	if len(c.Plan.Ticks) == 1 && !c.Plan.Stepped && c.Cost == 1 && c.MaxWait == 0 && c.Penalty == 0 {
		return c.Plan.Args[1:4:4]
	}
	return c.AppendArgs(make([]any, 0, 4+len(c.Plan.Args)))
}

// ScriptArgs returns the keys and script arguments (the batch form) that
// decide calls in order in one script call. Calls with the same numbers
// share a group, so that the script parses them once (see the layout table
// at the top of core/internal/redisstore/bucket.lua).
func ScriptArgs(calls []*Query) ([]string, []any) {
	keys := make([]string, len(calls))
	args := make([]any, 1, 8)
	var heads []*Query // the first call of each group
	var groups []int   // each call's group, 1-based; needed with more than one
	var quotas []*quotaEntry
	var quotaAt []int // each quota entry's call, 1-based
	for i, c := range calls {
		if c.quota != nil {
			quotas, quotaAt = append(quotas, c.quota), append(quotaAt, i+1)
		}
		keys[i] = c.RKey
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
			args = c.AppendGroup(args)
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
	if quotas != nil {
		args = appendQuota(args, quotaAt, quotas)
		for _, q := range quotas {
			keys = append(keys, q.ekey)
		}
	}
	for _, g := range groups {
		args = append(args, strconv.Itoa(g))
	}
	return keys, args
}

// ParseReply checks and decodes one key's reply into a decision (see the
// layout table at the top of core/internal/redisstore/bucket.lua).
func ParseReply(v []int64, p *plan) (decision, error) {
	flags := v[0]
	if flags == -1 && v[1] == 0 && v[2] == 0 && v[3] == 0 && v[4] == 0 {
		return decision{}, ErrKeyFailed
	}
	d := decision{
		Allowed:   flags&1 == 1,
		Locked:    flags&2 == 2,
		Index:     int(flags >> 2),
		Remaining: v[1],
		Reset:     v[3],
		Next:      v[4],
	}
	if d.Allowed {
		d.Wait = v[2]
	} else {
		d.Retry = v[2]
	}
	if flags < 0 || d.Index >= len(p.Ticks) || d.Remaining < 0 || v[2] < 0 || d.Reset < 0 || d.Next < 0 ||
		(d.Allowed && d.Locked) || (!d.Allowed && d.Retry == 0) {
		return decision{}, fmt.Errorf("%w %v", errBadReply, v)
	}
	return d, nil
}
