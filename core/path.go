package core

import (
	"context"
	_ "embed"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core/internal/model"
)

// MaxLevels bounds the levels of a path (see [Limiter.PreparePath]).
const MaxLevels = 8

// maxLevelName bounds a level's name, which labels results and metrics.
const maxLevelName = 64

// Level is one level of a path of keys (see [Limiter.PreparePath]): a name
// that says what the level's keys are ("org", "team", "user", "key"), and
// the limits every key of the level is decided under, all of them together
// as [Limiter.Prepare]'s are. The name is the rule's, never a request's: it
// labels results, headers and metrics, so it must be one of a few.
type Level struct {
	Name   string
	Limits []Limit
	Share  *Share // the level is a parent its children share (see Share); nil: not shared
}

// PathRule decides a path of keys, such as an organisation, one of its
// teams, a user of the team and one of the user's API keys, as one: every
// level's limits are checked in one script call, atomically, and the
// request is admitted only if every level admits it. Then every level is
// charged; when any level denies, none is. (A limiter that counted each
// level on its own would charge the organisation's quota for requests its
// user's limit denied.) The [Result] names the level that decided
// ([Result.Level]) and its limit.
//
// A path is given root first, one key per level; it may stop short of the
// last levels (a request without an API key decides the organisation, team
// and user levels only). A level's bucket is named by the path up to it,
// so a team "eng" of one organisation and a team "eng" of another are
// apart, and by the level's name and limits: paths that differ below a
// level, or whose lower levels have other limits (other plans), share its
// bucket. A level's bucket is not shared with a [Rule] of the same key and
// limits.
//
// In Redis every level of a path lives in the root's Cluster slot (its
// hash tag is the root key's), so one script call can decide them all.
// The whole of one root's traffic, all its teams, users and keys, is then
// decided by one master: a very large root is one master's load, as a
// single hot key is. docs/engine.md has the figures.
//
// A PathRule is safe for concurrent use. Get one from
// [Limiter.PreparePath]. The deny cache ([WithDenyCache]) does not answer
// for paths; every decision asks Redis.
type PathRule struct {
	lim     *Limiter
	scope   string
	names   []string
	plans   []*plan       // one per level, in a scope of the path's scope and the level's name
	views   []*model.Plan // each plan's part a store reads
	minB    int64         // the smallest Burst of every level
	penalty int64         // microseconds; -1: the limiter's (see PathRule.WithPenalty)
	dryRun  bool
	share   *pathShare // the shared level's, if any (see Share)
	class   int        // the requests' class (see PathRule.InClass); -1: none
	canary  *canary    // the roots it enforces (see PathRule.WithEnforce); nil: all
}

// PreparePath validates and compiles a path's levels, root first, into a
// [PathRule]. scope names the path's buckets as [Limiter.PrepareScoped]'s
// scope does; the empty scope is a scope of its own. PreparePath returns an
// error for no level or more than [MaxLevels], a level without a name,
// with a name longer than 64 bytes or used twice, and (wrapping
// [ErrInvalidLimit]) a level without limits, with more than eight, or with
// an invalid one; and for a [Share] that is not valid (see there): on more
// than one level, on a level of other than one continuous limit, fair
// with no level below, a weight below 1, a class without a name or with
// one used twice, a reserve outside 0 to 1, or reserves summing over 1.
func (l *Limiter) PreparePath(scope string, levels ...Level) (*PathRule, error) {
	if len(levels) == 0 || len(levels) > MaxLevels {
		return nil, fmt.Errorf("core: PreparePath: %d levels, want 1 to %d", len(levels), MaxLevels)
	}
	r := &PathRule{lim: l, scope: scope, penalty: -1, class: -1}
	for i, lv := range levels {
		switch {
		case lv.Name == "":
			return nil, fmt.Errorf("core: PreparePath: level %d has no name", i)
		case len(lv.Name) > maxLevelName:
			return nil, fmt.Errorf("core: PreparePath: level %d's name is %d bytes, at most %d", i, len(lv.Name), maxLevelName)
		case slices.Contains(r.names, lv.Name):
			return nil, fmt.Errorf("core: PreparePath: two levels are named %q", lv.Name)
		}
		p, err := l.plans.compileScoped(levelScope(scope, lv.Name), lv.Limits)
		if err != nil {
			return nil, fmt.Errorf("level %q: %w", lv.Name, err)
		}
		r.names = append(r.names, lv.Name)
		r.plans = append(r.plans, p)
		r.views = append(r.views, &p.Plan)
		if i == 0 || p.minB < r.minB {
			r.minB = p.minB
		}
		if lv.Share == nil {
			continue
		}
		if r.share != nil {
			return nil, fmt.Errorf("core: PreparePath: levels %q and %q have a Share; at most one level of a path is shared", r.names[r.share.level], lv.Name)
		}
		if r.share, err = compileShare(lv.Share, i, levels, p); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// levelScope is the scope of a path level's plan: a level's buckets are
// apart from those of every other level, path scope and Rule.
func levelScope(scope, name string) string {
	return "path " + strconv.Quote(scope) + " level " + strconv.Quote(name)
}

// Levels returns the names of the rule's levels, root first.
func (r *PathRule) Levels() []string { return slices.Clone(r.names) }

// LevelLimits returns a copy of the limits of level i (0 is the root).
func (r *PathRule) LevelLimits(i int) []Limit { return slices.Clone(r.plans[i].limits) }

// WithPenalty returns a rule with the same levels and buckets whose
// denials lock the deciding level's key for d, as [Rule.WithPenalty] does
// for a key: the other levels are not locked. It returns an error for a
// negative d or one above [MaxPenalty].
func (r *PathRule) WithPenalty(d time.Duration) (*PathRule, error) {
	if d < 0 || d > MaxPenalty {
		return nil, fmt.Errorf("core: PathRule.WithPenalty: %s is not from 0 to %s", d, MaxPenalty)
	}
	c := *r
	c.penalty = micros(d)
	return &c, nil
}

// DryRun returns a rule with the same levels, buckets, penalty and canary
// whose decisions are marked [Result.DryRun], as [Rule.DryRun] does.
func (r *PathRule) DryRun() *PathRule {
	c := *r
	c.dryRun = true
	return &c
}

// Allow is shorthand for [PathRule.AllowN] with a cost of 1.
func (r *PathRule) Allow(ctx context.Context, path ...string) (Result, error) {
	res, _, err := r.lim.admitPath(ctx, r, path, 1)
	return res, err
}

// AllowN decides whether an event of cost n on path (root first, one key
// per level, at most as many keys as the rule has levels) is admitted by
// every level, and charges n to every level if so, atomically. A denied
// event charges nothing, at any level. Errors are those of
// [Limiter.AllowN], and an error for a path with no key, more keys than
// levels, or an empty key.
func (r *PathRule) AllowN(ctx context.Context, path []string, n int) (Result, error) {
	res, _, err := r.lim.admitPath(ctx, r, path, n)
	return res, err
}

// Reserve decides a request of estimated cost n on path exactly as
// [PathRule.AllowN] does, and returns a [Reservation] whose Settle charges
// the final cost instead, at every level the request was charged, in one
// script call (see [Rule.Reserve]). Each level keeps its own marker, so a
// retried settlement changes nothing. A level with an interval or
// calendar refill is settled in the window the reservation was made in,
// as [Rule.Reserve] says.
func (r *PathRule) Reserve(ctx context.Context, path []string, n int) (*Reservation, error) {
	l := r.lim
	at := l.now()
	res, pd, err := l.admitPath(ctx, r, path, n)
	if err != nil {
		return nil, err
	}
	rv := &Reservation{Result: res, lim: l, p: pd.minPlan, key: path[0], n: int64(n), made: time.Now(), at: at}
	ps := &pathSettle{plans: r.plans[:len(path)], views: r.views[:len(path)], keys: pd.keys}
	rv.path = ps
	switch {
	case !res.Allowed:
	case res.Degraded && pd.failOpen:
	case res.Degraded:
		rv.via, rv.held = settleLocal, int64(n)
		for _, p := range ps.plans {
			sh := l.share(p)
			ps.ticks = append(ps.ticks, sh.ticks)
			rv.held = min(rv.held, sh.minB)
		}
	default:
		rv.reserved()
	}
	return rv, nil
}

// pathDecision is what admitPath found out beyond the Result.
type pathDecision struct {
	keys     []string // each level's key: the path up to it (see pathKeyOf)
	minPlan  *plan    // the plan of the smallest Burst on the path
	failOpen bool     // admitted under FailOpen: nothing was counted
}

// pathKeyOf returns the key of a path's level i: the keys up to it, each
// with its length, so that no two paths give one level the same key.
func pathKeyOf(path []string, i int) string {
	if i == 0 {
		return path[0]
	}
	var b strings.Builder
	for j := 0; j <= i; j++ {
		if j > 0 {
			b.WriteByte('/')
		}
		b.WriteString(strconv.Itoa(len(path[j])))
		b.WriteByte(':')
		b.WriteString(path[j])
	}
	return b.String()
}

// admitPath validates and decides a request of cost n on path.
func (l *Limiter) admitPath(ctx context.Context, r *PathRule, path []string, n int) (Result, pathDecision, error) {
	var pd pathDecision
	if len(path) == 0 || len(path) > len(r.plans) {
		return Result{}, pd, fmt.Errorf("core: a path of %d keys for a rule of %d levels", len(path), len(r.plans))
	}
	plans := r.plans[:len(path)]
	pd.minPlan = plans[0]
	for i, k := range path {
		if k == "" {
			return Result{}, pd, fmt.Errorf("core: the key of level %q is empty", r.names[i])
		}
		if plans[i].minB < pd.minPlan.minB {
			pd.minPlan = plans[i]
		}
	}
	if err := checkCost(ctx, n, pd.minPlan.minB); err != nil {
		return Result{}, pd, err
	}
	now := l.now()
	cost := int64(n)
	penalty := l.penalty
	if r.penalty >= 0 {
		penalty = r.penalty
	}
	pd.keys = make([]string, len(path))
	q := &pathAsk{Names: r.names, Plans: r.views[:len(path)], Keys: pd.keys, IDs: make([]uint64, len(path)), Levels: make([][]tickLimit, len(path)), Cost: cost, Penalty: penalty, Now: now}
	for i := range path {
		pd.keys[i] = pathKeyOf(path, i)
		q.IDs[i] = plans[i].ID
		q.Levels[i] = plans[i].Ticks
	}
	q.Share = r.gate(path, q.Levels)
	dry := r.dry(path[0])
	d, lv, err := l.store.DecidePath(ctx, q)
	if err == nil {
		if d.Allowed && l.remote {
			for i, p := range plans {
				l.local.charge(p.ID, pd.keys[i], now, l.share(p).ticks, cost, 2*d.Remaining < int64(plans[lv].limits[d.Index].Burst))
			}
		}
		return l.donePath(d, r, lv, SourceStore, false, dry), pd, nil
	}
	cause, gone := split(err)
	if gone != nil {
		return Result{}, pd, gone // the caller gave up: no decision
	}
	switch open, err := l.unavailable(cause, true, dry); {
	case err != nil:
		return Result{}, pd, err
	case open:
		pd.failOpen = true
		res := l.donePath(decision{Allowed: true, Remaining: -1}, r, len(path)-1, SourceFailOpen, true, dry)
		return res, pd, nil
	}
	shares := make([]*share, len(path))
	minB := cost
	for i, p := range plans {
		shares[i] = l.share(p)
		q.Levels[i] = shares[i].ticks
		minB = min(minB, shares[i].minB)
	}
	q.Share = r.gate(path, q.Levels) // the fallback's share of the parent: its reserves and contention in its Burst
	d, lv = l.local.takePath(q, minB)
	d.At = now
	res := l.resultPath(d, r, lv, true, dry)
	res.Limit = shares[lv].limits[d.Index] // the limit actually enforced
	l.observe(&res, SourceFallback)
	return res, pd, nil
}

// resultPath turns a path's decision, made by level lv, into a Result;
// dry marks it a dry run's (see PathRule.dry).
func (l *Limiter) resultPath(d decision, r *PathRule, lv int, degraded, dry bool) Result {
	res := resultOf(&d, r.plans[lv])
	res.Level = r.names[lv]
	res.Class = r.className()
	res.Reason = reasonOf(d)
	res.Degraded = degraded
	res.DryRun = dry
	if d.Remaining < 0 { // fail-open: nothing was counted
		res.Remaining = res.Limit.Burst
	}
	return res
}

// donePath is resultPath, reported to the observer.
func (l *Limiter) donePath(d decision, r *PathRule, lv int, src Source, degraded, dry bool) Result {
	res := l.resultPath(d, r, lv, degraded, dry)
	l.observe(&res, src)
	return res
}

// observe reports a decision to the observer, if any. It is not inlined:
// the copy of res for the observer's call, built in done, sat between its
// other steps and cost a decision without an observer two code lines.
//
//go:noinline
func (l *Limiter) observe(res *Result, src Source) {
	if l.obs != nil {
		l.obs.ObserveDecision(*res, src)
	}
}

// takePath decides q, a request on a path, in local memory, all or
// nothing (see stepPath), at cost (q's, or less in a fallback): every
// level's shard is locked, in shard order, for the whole decision. Level
// i is q.Keys[i] under the plan of id q.IDs[i] and limits q.Levels[i]; a
// shared level's records are the store's (see stepPathShare).
func (s *localStore) takePath(q *pathAsk, cost int64) (decision, int) {
	ids, keys, now, levels, penalty := q.IDs, q.Keys, q.Now, q.Levels, q.Penalty
	const maxWait = 0
	n := len(keys)
	lks := make([]localKey, n)
	idx := make([]int, n)
	for i := range keys {
		lks[i] = makeLocalKey(ids[i], keys[i])
		idx[i] = s.m.shardIndex(lks[i])
	}
	order := slices.Clone(idx)
	slices.Sort(order)
	order = slices.Compact(order)
	for _, i := range order {
		s.m.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range order {
			s.m.shards[i].mu.Unlock()
		}
	}()
	bs := make([]*bucket, n)
	for i := range keys {
		b := &bucket{}
		if e := s.m.entry(&s.m.shards[idx[i]], lks[i], now, false); e != nil {
			*b = e.b
			b.tats = slices.Clone(e.b.tats)
		}
		bs[i] = b
	}
	var d decision
	var lv int
	var wrote []bool
	if g := q.Share; g != nil && g.Fair {
		pk, ck := shareRecordKeys(ids, keys, g)
		s.shares.take(pk, ck, now, g.Window, func(p *fairParent, c *fairChild) {
			d, lv, wrote = stepPathShare(bs, now, levels, cost, maxWait, penalty, g, p, c)
		})
	} else {
		d, lv, wrote = stepPathShare(bs, now, levels, cost, maxWait, penalty, q.Share, nil, nil)
	}
	for i := range keys {
		if !wrote[i] {
			continue
		}
		// Inserting one level may evict another's entry from a full
		// shard: the fallback's memory is bounded, and an evicted
		// bucket is a full one, as after any eviction.
		e := s.m.entry(&s.m.shards[idx[i]], lks[i], now, true)
		tats := bs[i].tats
		e.b = *bs[i]
		e.b.tats = append(e.buf[:0], tats...)
	}
	return d, lv
}

// shardIndex is the index of k's shard (see shard).
func (s *shardedMap[V]) shardIndex(k localKey) int {
	return int((maphash.String(shardSeed, k.key) ^ k.id ^ k.sum) % numShards)
}

// pathSettle is what a path's reservation needs to be settled.
type pathSettle struct {
	plans []*plan       // each level's
	views []*model.Plan // each level's part a store reads
	keys  []string      // each level's key (see pathKeyOf)
	ticks [][]tickLimit // in memory: each level's limits as charged
}
