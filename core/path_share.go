package core

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
)

// MaxWeight bounds a child's weight under a fair share (see [Share]).
const MaxWeight = 1_000_000

// maxClasses bounds a shared level's priority classes.
const maxClasses = 8

// Reasons a shared level ([Share]) gives for a denial beyond its bucket,
// in [Result.Reason]: a bounded label for metrics and answers.
const (
	// ReasonFairShare: the shared level was contended and the request's
	// child had taken more than its fair share of it recently.
	ReasonFairShare = "fair share"
	// ReasonReserve: the take would have spent the reserves of the
	// classes above the request's.
	ReasonReserve = "class reserve"
)

// Share makes a path's level a parent shared by its children, the keys
// of the level below: an upstream's quota shared by tenants, an
// organisation's plan shared by its teams. Set it on at most one [Level]
// of a path, a level of one continuous limit (its bucket is what is
// shared). docs/fairshare.md gives the algorithm and its error.
//
// With Fair, when the level's bucket is contended (a take would leave
// less than half its Burst), a child may take only while its recent
// consumption (a sliding window of Window) is within its weighted share
// of the parent's recent total, with a slack that shrinks to none as the
// bucket empties: a child asking less than its share gets what it asks,
// the rest goes to the others in proportion to their weights, and an
// idle share is used by whoever asks (above the contention level every
// child takes freely). The records are O(1) per decision: the parent's
// sums and the asking child's own.
//
// With Classes (highest first), a request of class i may take from the
// level only while what the take leaves is at least the reserves of the
// classes above it, each a fraction of the level's Burst. A request's
// class is chosen with [PathRule.InClass]; a request of no class is of
// the last one.
//
// A Share is read once, by [Limiter.PreparePath]; changing it after has
// no effect.
type Share struct {
	// Fair shares the level fairly among its children when contended.
	Fair bool
	// Weights weighs children by their key (the level below's, as the
	// path gives it: behind a middleware, as the level's key function
	// returns it, its prefix included, such as "tenant:acme"); a child
	// not named weighs 1. Each weight is 1 to [MaxWeight]. Default: all 1.
	Weights map[string]int
	// Window is the span over which a child's consumption is counted.
	// Default: 1 s; at least 1 ms and at most an hour.
	Window time.Duration
	// Classes are priority classes, highest first. Default: none.
	Classes []Class
}

// Class is a priority class of a shared level (see [Share]): its name,
// which labels results and metrics (so it must be one of a few, never
// request data), and its reserve, the fraction of the level's Burst the
// classes below it may not take. The reserves of a level's classes sum to
// at most 1.
type Class struct {
	Name    string
	Reserve float64
}

// pathShare is a PathRule's compiled Share.
type pathShare struct {
	level   int
	fair    bool
	weights map[string]int64
	window  int64    // microseconds
	classes []string // names, highest first
	floors  []int64  // each class's floor, parts per million of the Burst
}

// compileShare validates s, the Share of level i of levels, compiled as
// p.
func compileShare(s *Share, i int, levels []Level, p *plan) (*pathShare, error) {
	lv := levels[i]
	switch {
	case len(p.Ticks) != 1 || p.Stepped:
		return nil, fmt.Errorf("core: PreparePath: level %q has a Share; a shared level has one continuous limit", lv.Name)
	case !s.Fair && len(s.Classes) == 0:
		return nil, fmt.Errorf("core: PreparePath: level %q's Share has neither Fair nor Classes", lv.Name)
	case s.Fair && i == len(levels)-1:
		return nil, fmt.Errorf("core: PreparePath: level %q shares fairly among its children, but no level is below it", lv.Name)
	case s.Window != 0 && (s.Window < time.Millisecond || s.Window > time.Hour):
		return nil, fmt.Errorf("core: PreparePath: level %q's Share.Window is %s, want 1ms to 1h", lv.Name, s.Window)
	case len(s.Classes) > maxClasses:
		return nil, fmt.Errorf("core: PreparePath: level %q has %d classes, at most %d", lv.Name, len(s.Classes), maxClasses)
	}
	ps := &pathShare{level: i, fair: s.Fair, window: micros(s.Window), weights: map[string]int64{}}
	if ps.window == 0 {
		ps.window = micros(time.Second)
	}
	for k, w := range s.Weights {
		if w <= 0 || w > MaxWeight {
			return nil, fmt.Errorf("core: PreparePath: level %q's Share weighs child %q %d; a weight is 1 to %d", lv.Name, k, w, MaxWeight)
		}
		ps.weights[k] = int64(w)
	}
	if err := ps.compileClasses(lv.Name, s.Classes); err != nil {
		return nil, err
	}
	return ps, nil
}

// compileClasses validates the classes of the shared level named level.
func (ps *pathShare) compileClasses(level string, classes []Class) error {
	var sum float64
	for _, c := range classes {
		switch {
		case c.Name == "" || len(c.Name) > maxLevelName:
			return fmt.Errorf("core: PreparePath: level %q has a class named %q; a class's name is 1 to %d bytes", level, c.Name, maxLevelName)
		case slices.Contains(ps.classes, c.Name):
			return fmt.Errorf("core: PreparePath: level %q has two classes named %q", level, c.Name)
		case !(c.Reserve >= 0 && c.Reserve <= 1):
			return fmt.Errorf("core: PreparePath: class %q's Reserve is %v; a reserve is from 0 to 1", c.Name, c.Reserve)
		}
		ps.classes = append(ps.classes, c.Name)
		ps.floors = append(ps.floors, int64(math.Round(sum*1e6)))
		sum += c.Reserve
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("core: PreparePath: level %q's class reserves sum to %v, more than 1", level, sum)
	}
	return nil
}

// InClass returns a rule with the same levels and buckets whose requests
// are of the class named name of its shared level (see [Share]). It
// returns an error for a rule without classes or a name none has.
func (r *PathRule) InClass(name string) (*PathRule, error) {
	if r.share == nil || len(r.share.classes) == 0 {
		return nil, fmt.Errorf("core: PathRule.InClass(%q): the rule has no classes", name)
	}
	i := slices.Index(r.share.classes, name)
	if i < 0 {
		return nil, fmt.Errorf("core: PathRule.InClass(%q): no such class; the rule's are %q", name, r.share.classes)
	}
	c := *r
	c.class = i
	return &c, nil
}

// Classes returns the names of the rule's classes, highest first; nil
// for a rule without.
func (r *PathRule) Classes() []string {
	if r.share == nil {
		return nil
	}
	return slices.Clone(r.share.classes)
}

// className is the name of the rule's class, "" for a rule without.
func (r *PathRule) className() string {
	if r.share == nil || len(r.share.classes) == 0 {
		return ""
	}
	if r.class < 0 {
		return r.share.classes[len(r.share.classes)-1]
	}
	return r.share.classes[r.class]
}

// gate returns the shared level's part of a decision of path under
// levels (each level's limits; in a fallback, its share): the tokens of
// reserves and contention are of the shared level's Burst there. It
// returns nil for a rule without a Share or a path that stops above it.
func (r *PathRule) gate(path []string, levels [][]tickLimit) *shareGate {
	s := r.share
	if s == nil || len(path) <= s.level {
		return nil
	}
	burst := levels[s.level][0].B
	g := &shareGate{Level: s.level, Fair: s.fair, Weight: 1, Window: s.window, Contend: ceilDiv(burst, 2)}
	if len(path) > s.level+1 {
		if w, ok := s.weights[path[s.level+1]]; ok {
			g.Weight = w
		}
	}
	if n := len(s.floors); n > 0 {
		i := r.class
		if i < 0 {
			i = n - 1
		}
		g.Floor = ceilDiv(burst*s.floors[i], 1_000_000)
	}
	return g
}

// reasonOf is a decision's Reason as Result.Reason says it.
func reasonOf(d decision) string {
	switch d.Reason {
	case reasonFair:
		return ReasonFairShare
	case reasonClass:
		return ReasonReserve
	}
	return ""
}

// maxShareRecords bounds the children the local records of shared
// levels hold (see shareLocalRecords).
const maxShareRecords = 1 << 14

// shareLocalRecords are the records of shared levels in local memory
// (the memory store's, and the fallback's for its share of the parent),
// by the parent's and the child's names (see shareRecordKeys). They are bounded: past
// maxShareRecords children, the records of windows gone by are dropped,
// then any, as an evicted record reads as empty.
type shareLocalRecords struct {
	mu       sync.Mutex
	parents  map[string]*fairParent
	children map[string]*fairChild
}

func newShareLocalRecords() *shareLocalRecords {
	return &shareLocalRecords{parents: map[string]*fairParent{}, children: map[string]*fairChild{}}
}

// take runs f on the records of parent and child, under the records'
// lock.
func (s *shareLocalRecords) take(parent, child string, now, window int64, f func(*fairParent, *fairChild)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.parents[parent]
	if p == nil {
		if len(s.parents) >= maxShareRecords {
			s.sweep(now, window)
		}
		p = &fairParent{}
		s.parents[parent] = p
	}
	c := s.children[child]
	if c == nil {
		if len(s.children) >= maxShareRecords {
			s.sweep(now, window)
		}
		c = &fairChild{}
		s.children[child] = c
	}
	f(p, c)
}

// sweep drops the records of windows gone by, then, if as many are left,
// half of them.
func (s *shareLocalRecords) sweep(now, window int64) {
	w := now / window
	for k, c := range s.children {
		if c.win < w-1 {
			delete(s.children, k)
		}
	}
	for k, p := range s.parents {
		if p.win < w-1 {
			delete(s.parents, k)
		}
	}
	for k := range s.children {
		if len(s.children) < maxShareRecords/2 {
			break
		}
		delete(s.children, k)
	}
	for k := range s.parents {
		if len(s.parents) < maxShareRecords/2 {
			break
		}
		delete(s.parents, k)
	}
}

// shareRecordKeys are the local names of the records of a decision on a
// path whose levels' plan IDs are ids and keys are keys, under gate g.
func shareRecordKeys(ids []uint64, keys []string, g *shareGate) (parent, child string) {
	parent = strconv.FormatUint(ids[g.Level], 16) + " " + keys[g.Level]
	if g.Level+1 < len(keys) {
		return parent, parent + " " + keys[g.Level+1]
	}
	return parent, parent + " ~"
}
