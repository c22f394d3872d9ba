package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"time"
)

// replaceForeign handles a decision on rkey that failed for a reason of the
// key (see keyFault): if the key holds a value of another type, which no
// script of the limiter writes (another program writes under its prefix, or
// an operator by hand), it deletes it through the road (as a reset), so
// the key's next decisions are Redis's again rather than the fallback's
// forever, and logs that once per key (see keyFailed's bound). It reports
// whether it replaced the value; otherwise the caller logs the fault as
// keyFailed does. The decision that found the value is still decided under
// the failure policy.
func (s *Store) replaceForeign(ctx context.Context, nd *node, rkey, kind string, err error) bool {
	if rkey == "" || (kind != OpDecide && kind != OpPeek) || !foreignFault(err) {
		return false
	}
	if _, ok := s.notForeign.Load(rkey); ok {
		return false
	}
	var vals []int64
	_, rerr := s.onNode(ctx, nd, s.cfg.Now(), OpReset, rkey, func(budget time.Duration) (time.Duration, error) {
		var took time.Duration
		var err error
		o := op{script: foreignScript, keys: []string{rkey}}
		vals, took, err = s.runOp(ctx, nd, &o, budget)
		return took, err
	})
	if rerr != nil || len(vals) != 1 || vals[0] != 1 {
		if rerr == nil && s.notForeignN.Load() < maxNotForeign {
			// Another fault of the key (a calendar its windows do not
			// hold): not asked again, so it costs no round trip per
			// decision.
			if _, had := s.notForeign.LoadOrStore(rkey, struct{}{}); !had {
				s.notForeignN.Add(1)
			}
		}
		return false
	}
	if s.keyLogCount.Load() < keyLogs {
		if _, said := s.keyLogSaid.LoadOrStore(rkey, struct{}{}); !said {
			s.keyLogCount.Add(1)
			s.up.Log().Warn("sluice: a bucket's key held a value of another type; it was deleted, and the key's bucket starts full. Another program writes under the limiter's prefix (core.WithPrefix)",
				"node", nd.brk.node, "key", rkey, "error", err)
		}
	}
	return true
}

// foreignLevel logs, once per stored key (within keyFailed's bound), that
// path.lua found a value of another type at a path's level, named level,
// and deleted it: the level's bucket starts full, and the path was decided
// by Redis.
func (s *Store) foreignLevel(nd *node, rkey, level string) {
	if s.keyLogCount.Load() >= keyLogs {
		return
	}
	if _, said := s.keyLogSaid.LoadOrStore(rkey, struct{}{}); said {
		return
	}
	s.keyLogCount.Add(1)
	s.up.Log().Warn("sluice: a path level's key held a value of another type; it was deleted, and the level's bucket starts full. Another program writes under the limiter's prefix (core.WithPrefix)",
		"node", nd.brk.node, "key", rkey, "level", level)
}

// maxNotForeign bounds the keys remembered as faulty for another reason.
const maxNotForeign = 1024

// foreignFault reports whether err may come from a value of another type:
// Redis's WRONGTYPE, or a key's failure in a batch (whose code the batch
// does not keep).
func foreignFault(err error) bool {
	return errors.Is(err, ErrKeyFailed) || strings.Contains(err.Error(), "WRONGTYPE")
}
