package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the warning marker of a key (core.Rule.WithWarning): an
// operation of kind OpThreshold on the road, sent only when a decision
// crossed a rule's warning threshold, never beside every decision.

//go:embed warn.lua
var warnLua string

// warnScript sets a warning marker (see warn.lua).
var warnScript = redis.NewScript(warnLua)

// WarnKey builds the name of the warning marker of the bucket rkey (built
// by RedisKey with prefix and fp) for its limit index:
//
//	<prefix>{<tag>}<fingerprint>~w<index>:<key>
//
// In the bucket's hash tag, and never a bucket's name (a bucket has ':'
// right after the fixed-length fingerprint), a holds' ("~h2:"), their
// ends' ("~e:") nor a settlement marker's (an id has no ':').
func WarnKey(rkey, prefix, fp string, index int) string {
	at := len(prefix) + 6 + len(fp)
	return rkey[:at] + "~w" + strconv.Itoa(index) + rkey[at:]
}

// Warn sets key's warning marker under limit index of p for window
// microseconds (rounded up to milliseconds), unless it is set: first
// reports that this call set it; otherwise left is how long the marker
// holds still, in microseconds. The error is a *noAnswer, as a Reset's.
func (s *Store) Warn(ctx context.Context, key string, p *plan, index int, window, now int64) (first bool, left int64, err error) {
	rkey := s.RKey(p.FP, key)
	wkey := WarnKey(rkey, s.cfg.Prefix, p.FP, index)
	nd := s.node(ctx, rkey)
	ms := max(1, (window+999)/1000)
	var v []int64
	routed, err := s.onNode(ctx, nd, now, OpThreshold, rkey, func(budget time.Duration) (time.Duration, error) {
		var took time.Duration
		var err error
		v, took, err = s.runOp(ctx, nd, &op{script: warnScript, keys: []string{wkey}, args: []any{ms}}, budget)
		if err == nil && (len(v) != 2 || v[0] < 0 || v[0] > 1 || v[1] < 0) {
			err = fmt.Errorf("%w %v from the warning script", errBadReply, v)
		}
		return took, err
	})
	if !routed || err != nil {
		return false, 0, s.unrouted(ctx, nd, now, routed, err, false)
	}
	return v[0] == 1, v[1] * 1000, nil
}
