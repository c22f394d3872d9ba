package core

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/core/internal/model"
)

// plan is a validated set of limits decided together on one key: the tick
// form of each limit, the fingerprint that names their shared bucket, and the
// script arguments, computed once and reused by every decision.
type plan struct {
	model.Plan // what a store reads: the tick limits, fingerprints, script arguments

	limits     []Limit
	local      share                 // the local fallback's limits, fixed
	fleetShare atomic.Pointer[share] // the local limits for a fleet's size (see Limiter.share)
	minB       int64                 // the smallest Burst: no single request may cost more
	maxW       int64                 // longest exact reservation in microseconds

	coarse []coarseFallback // fallback limits that could not be used as given

	scope   string    // the scope it was compiled for (see Limiter.PrepareScoped)
	dryRun  bool      // its results are marked DryRun (see Rule.DryRun)
	canary  *canary   // the keys it enforces (see Rule.WithEnforce); nil: all
	warn    *warnConf // its warning threshold (see Rule.WithWarning); nil: none
	penalty int64     // the penalty lock in microseconds (see Rule.WithPenalty); -1: the limiter's

	lease *leaseConf // token leases (see Rule.WithTokenLeases); nil: none
	top   topRefs    // its limits' top-talkers sketches (see WithTopTalkers); nil: none

	shadow  []*plan    // the shadow limits, a plan of one each (see Rule.WithShadowLimits); nil: none
	shadows *shadowSet // the same, as results report them
}

// newPlan compiles limits; fallback, if not nil, maps each limit to the
// local fallback's limit, which otherwise is the limit itself.
func newPlan(limits []Limit, fallback func(Limit) Limit) (*plan, error) {
	return newScopedPlan("", limits, fallback)
}

// newScopedPlan is newPlan for a scope: a non-empty scope is part of the
// fingerprint, so its buckets are apart from those of the same limits in
// any other scope. The empty scope is the limits' own fingerprint.
func newScopedPlan(scope string, limits []Limit, fallback func(Limit) Limit) (*plan, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("%w: no limit given", ErrInvalidLimit)
	}
	if len(limits) > maxLimits {
		return nil, fmt.Errorf("%w: %d limits on one key, at most %d", ErrInvalidLimit, len(limits), maxLimits)
	}
	p := &plan{limits: append([]Limit(nil), limits...)}
	p.Ticks = make([]tickLimit, len(limits))
	p.Args = append(p.Args, strconv.Itoa(len(limits)))
	p.maxW = maxExact
	h := sha256.New()
	if scope != "" {
		fmt.Fprintf(h, "scope %q;", scope)
	}
	for i, l := range limits {
		t, err := compileLimit(l)
		if err != nil {
			return nil, err
		}
		p.Ticks[i] = t
		if i == 0 || t.B < p.minB {
			p.minB = t.B
		}
		p.maxW = min(p.maxW, t.MaxWaitMicros())
		switch {
		case t.Calendar() != nil:
			p.Stepped, p.Cal = true, true
		case t.Stepped():
			p.Stepped = true
			p.Args = append(p.Args, "0", strconv.FormatInt(t.St.K, 10), strconv.FormatInt(t.B, 10), strconv.FormatInt(t.St.Every, 10))
		default:
			p.Args = append(p.Args, strconv.FormatInt(t.R, 10), strconv.FormatInt(t.P, 10), strconv.FormatInt(t.B, 10))
		}
		// The fingerprint covers what decides the bucket: the exact rate
		// (not its reduced form, so 1/s and 60/min stay apart as users
		// expect), the burst and the name; and a stepped refill's kind and
		// zone, so that a bucket never changes kind.
		fmt.Fprintf(h, "%d/%d/%d/%q;", l.Rate, l.Period, l.Burst, l.Name)
		if l.Refill != RefillContinuous {
			fmt.Fprintf(h, "refill %q zone %q;", l.Refill, l.Zone)
		}
	}
	sum := h.Sum(nil)
	p.FP = hex.EncodeToString(sum[:6])
	p.ID = binary.LittleEndian.Uint64(sum[8:16])
	local, coarse, err := newShare(p.limits, p.Ticks, fallback)
	if err != nil {
		return nil, err
	}
	p.local, p.coarse = *local, coarse
	p.scope = scope
	p.penalty = -1
	return p, nil
}

// share is the local fallback's view of a plan's limits: each limit's
// share for one replica.
type share struct {
	n      int         // the fleet size it was made for; 0 if fixed
	ticks  []tickLimit // the local limits
	limits []Limit     // the same, as limits, for results
	minB   int64       // the smallest local Burst
}

// newShare maps limits (compiled as ticks) through fallback, nil for the
// limits themselves. A limit valid for Redis is never refused because of
// its fallback: one whose fallback cannot be counted keeps its rate, with
// the fallback's burst if that is usable, and is returned in coarse.
func newShare(limits []Limit, ticks []tickLimit, fallback func(Limit) Limit) (*share, []coarseFallback, error) {
	s := &share{ticks: ticks, limits: limits}
	for i, t := range ticks {
		if i == 0 || t.B < s.minB {
			s.minB = t.B
		}
	}
	if fallback == nil {
		return s, nil, nil
	}
	var coarse []coarseFallback
	s.ticks = make([]tickLimit, len(limits))
	s.limits = make([]Limit, len(limits))
	for i, l := range limits {
		fl := fallback(l)
		t, err := compileLimit(fl)
		if fl.Period == overflowPeriod {
			err = fmt.Errorf("%w: its Period times the replicas is longer than a time.Duration holds (about 292 years)", ErrInvalidLimit)
		}
		if err != nil {
			coarse = append(coarse, coarseFallback{global: l, cause: err})
			share := fl.Burst
			fl = l
			if share >= 1 && share < l.Burst && !l.Refill.calendar() { // a calendar's Burst is its Rate
				fl.Burst = share // a smaller burst compiles wherever l's does
			}
			if t, err = compileLimit(fl); err != nil {
				return nil, nil, fmt.Errorf("fallback limit for %s: %w", l, err)
			}
		}
		s.ticks[i], s.limits[i] = t, fl
		if i == 0 || t.B < s.minB {
			s.minB = t.B
		}
	}
	return s, coarse, nil
}

// coarseFallback records a global limit whose fallback limit could not be
// counted exactly (its share of a long period overflows, say), and was
// replaced by the global rate.
type coarseFallback struct {
	global Limit
	cause  error
}

// MaxLimits is the most limits one decision may check together: a rule's,
// an Allow's, or an override's (package overrides).
const MaxLimits = 8

// maxLimits is MaxLimits.
const maxLimits = MaxLimits

// planCache remembers compiled plans so that calls which pass their limits
// each time do not recompile them. It is bounded: past maxPlans distinct
// limit sets, plans are compiled per call and not kept.
type planCache struct {
	fallback   func(Limit) Limit
	warn       func([]coarseFallback) // told of plans whose fallback was replaced; may be nil
	canaryHash *canaryHash            // the keyed hash of canaries (see Rule.WithEnforce)
	top        *topTalkers            // the top-talkers sketches (see WithTopTalkers); nil: none
	thresholds *thresholds            // told of threshold events (see Rule.WithWarning); nil: nothing listens
	last       atomic.Pointer[plan]   // the plan used last: a lock-free hit
	mu         sync.RWMutex
	plans      map[Limit]*plan // single-limit plans, the common case
}

const maxPlans = 4096

// compile makes limits' plan and reports a replaced fallback.
func (c *planCache) compile(limits []Limit) (*plan, error) {
	return c.compileScoped("", limits)
}

func (c *planCache) compileScoped(scope string, limits []Limit) (*plan, error) {
	p, err := newScopedPlan(scope, limits, c.fallback)
	if err == nil && len(p.coarse) > 0 && c.warn != nil {
		c.warn(p.coarse)
	}
	if err == nil && c.top != nil {
		p.top = c.top.refs(p.limits)
	}
	return p, err
}

// get returns the plan of limits.
func (c *planCache) get(limits []Limit) (*plan, error) {
	if p := c.hit(limits); p != nil {
		return p, nil
	}
	return c.getSlow(limits)
}

// hit returns the last plan used if limits is its one limit, else nil.
// It is inlined: [Limiter.AllowN] tests it before it calls get, as a
// lone decision's lookup through get's own call cost it two code lines
// more (clientcost -cold).
//
// It compares the limit's strings by identity (the same bytes at the same
// address), which a limit written in the code as a literal, or kept,
// passes (an empty string that points elsewhere does not): the == of two Limits is a call to a generated function, whose
// code and the spills around its call cost a lone decision six code lines
// from cold (clientcost -cold). A limit equal but built anew is found by
// getSlow.
func (c *planCache) hit(limits []Limit) *plan {
	if p := c.last.Load(); p != nil && len(limits) == 1 && sameLimit(&p.limits[0], &limits[0]) {
		return p
	}
	return nil
}

// sameLimit reports whether a and b are the same Limit with the same
// strings: word for word the same, so equal numbers and each string the
// same bytes at the same address (see hit). Padding or a field that is
// not a word would only make equal limits differ, which getSlow then
// finds; TestSameLimit checks that Limit is whole words.
//
// A loop of word compares, not the == of two arrays: that is a call to
// runtime.memequal, and the spills around a call were what this saves.
func sameLimit(a, b *Limit) bool {
	x, y := (*[limitSize]uintptr)(unsafe.Pointer(a)), (*[limitSize]uintptr)(unsafe.Pointer(b))
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

// limitSize is the size of a Limit in machine words.
const limitSize = unsafe.Sizeof(Limit{}) / unsafe.Sizeof(uintptr(0))

// getSlow is get for a plan hit does not find.
func (c *planCache) getSlow(limits []Limit) (*plan, error) {
	if p := c.last.Load(); p != nil && len(limits) == 1 && p.limits[0] == limits[0] {
		return p, nil // equal to the last one, with strings of its own
	}
	if len(limits) != 1 {
		// Several limits on a key are usually prepared once (a Rule);
		// direct callers pay the compilation.
		return c.compile(limits)
	}
	l := limits[0]
	p, err := c.lookup(l)
	if err == nil && c.last.Load() != p { // a store only when it changes keeps the line shared
		c.last.Store(p)
	}
	return p, err
}

// lookup finds or compiles l's plan in the map.
func (c *planCache) lookup(l Limit) (*plan, error) {
	c.mu.RLock()
	p := c.plans[l]
	c.mu.RUnlock()
	if p != nil {
		return p, nil
	}
	// The limit may come from request memory (a fiber header): keep a copy.
	l.Name = strings.Clone(l.Name)
	p, err := c.compile([]Limit{l})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.plans == nil {
		c.plans = make(map[Limit]*plan)
	}
	if len(c.plans) < maxPlans {
		c.plans[l] = p
	}
	c.mu.Unlock()
	return p, nil
}
