package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// The fleet section: N limiter instances, each with a go-redis client of its
// own configured as docs/production.md recommends, each driven by C callers,
// all in one process or spread over worker processes. See README.md.

// fleetLimit is the 10,000-key scenario's limit per key: realistic, and
// never reached (each key gets a few dozen requests a second), so every
// decision is admitted and written. A huge limit would not do: redis_rate
// skips its write when the increment vanishes in its floating point.
var fleetLimit = bench.Limit{Rate: 1000, Period: time.Second, Burst: 1000}

const (
	// fleetWarmup is how long every instance runs before a cell is measured,
	// so that its client has dialled and its script is loaded.
	fleetWarmup = 100 * time.Millisecond
	// fleetCellCost is the time a cell takes besides its warm-up and
	// measurement (building clients, starting workers), for the estimate.
	fleetCellCost = 200 * time.Millisecond
)

// shape is a fleet's shape: n limiter instances with c callers each.
type shape struct{ n, c int }

func (s shape) String() string { return fmt.Sprintf("%d×%d", s.n, s.c) }

// parseShapes reads a comma-separated list of NxC shapes.
func parseShapes(list string) ([]shape, error) {
	var out []shape
	for _, f := range strings.Split(list, ",") {
		a, b, ok := strings.Cut(strings.ReplaceAll(strings.TrimSpace(f), "×", "x"), "x")
		n, err1 := strconv.Atoi(a)
		c, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || n < 1 || c < 1 {
			return nil, fmt.Errorf("%q is not instances x callers, such as 8x8", f)
		}
		out = append(out, shape{n, c})
	}
	return out, nil
}

// fleetScenario is one key scenario of the fleet section.
type fleetScenario struct {
	name  string
	title string
	nkeys int
	limit bench.Limit
	// warmApart warms up on other keys, so that the measured keys start
	// from full buckets and what they admit can be set against the ideal,
	// Burst + Rate·t.
	warmApart bool
}

// hotLimitBound is the limit-bound hot key scenario's limit: one key that
// every caller hammers far beyond it, so the limit decides, not Redis.
var hotLimitBound = bench.Limit{Rate: 1000, Period: time.Second, Burst: 1000}

// scHotLimit names the limit-bound hot key scenario, run only when
// -fleet-scenarios names it.
const scHotLimit = "hotlimit"

// hotRealBound is the hot key scenario at a realistic bound: one key at
// 10⁶/s with a burst of one second's worth, which the fleet's callers can
// outrun, so leases (bound 1% of the burst, 10,000 tokens) must stay
// short-lived and small.
var hotRealBound = bench.Limit{Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}

// scHotReal names the realistic-bound hot key scenario, run only when
// -fleet-scenarios names it.
const scHotReal = "hotreal"

// fleetScenarioNames are the scenarios -fleet-scenarios chose.
var fleetScenarioNames = []string{scMany, scHot}

// idealSlot is the width of the slots in which a scenario set against the
// ideal counts its calls: a millisecond, a token of hotLimitBound.
const idealSlot = time.Millisecond

// slot is the width of the slots in which the scenario's calls are
// counted, for the ideal on the calls made; 0 if it is not set against
// the ideal.
func (sc fleetScenario) slot() time.Duration {
	if !sc.warmApart {
		return 0
	}
	return idealSlot
}

func allFleetScenarios() []fleetScenario {
	return []fleetScenario{
		{scMany, fmt.Sprintf("10,000 keys at %s each", fleetLimit), manyKeys, fleetLimit, false},
		{scHot, fmt.Sprintf("One hot key at %s (never reached)", highLimit), hotKeys, highLimit, false},
		{scHotLimit, fmt.Sprintf("One hot key at %s, hammered (limit-bound), from a full bucket", hotLimitBound), hotKeys, hotLimitBound, true},
		{scHotReal, fmt.Sprintf("One hot key at %s, from a full bucket", hotRealBound), hotKeys, hotRealBound, true},
	}
}

func fleetScenarios() []fleetScenario {
	var out []fleetScenario
	for _, sc := range allFleetScenarios() {
		if slices.Contains(fleetScenarioNames, sc.name) {
			out = append(out, sc)
		}
	}
	return out
}

// fleetKey names one fleet cell; procs is the multi-process layout.
type fleetKey struct {
	scenario string
	procs    bool
	shape    shape
	peer     string
}

// fleetRun is one round's measurement of a fleet cell.
type fleetRun struct {
	t         *tally
	redisCPU  float64          // Redis CPU seconds over the measured part; -1 if unknown
	redisSys  float64          // the kernel's part of redisCPU (used_cpu_sys); -1 if unknown
	clientCPU float64          // CPU seconds of the process(es) running the limiters; -1 if unknown
	cmds      map[string]int64 // Redis commands over the measured part, scripts' own included; nil if unknown
	limit     bench.Limit      // the scenario's limit, for the ideal
	round     int              // the round (from 0) it ran in, to pair it with other peers' runs of that round
}

// fleetCell holds a cell's runs, one per round.
type fleetCell struct {
	runs []fleetRun
	err  error // the last failure
	lost int   // rounds that failed
}

// fleetEnv is the environment of every fleet instance: one replica's
// client, configured as docs/production.md recommends.
func fleetEnv(addr string) bench.Env {
	return bench.Env{Addr: addr, PoolSize: bench.ProductionPoolSize, Production: true}
}

func (h *harness) fleetPeers() []bench.Peer {
	var out []bench.Peer
	for _, p := range h.peers {
		if p.Fleet {
			out = append(out, p)
		}
	}
	return out
}

// fleetPlan counts the fleet cells and returns about how long they take.
func (h *harness) fleetPlan() time.Duration {
	n := len(fleetScenarios()) * 2 * len(h.cfg.fleetShapes) * len(h.fleetPeers()) * h.cfg.fleetRounds
	h.total += n
	return time.Duration(n) * (h.cfg.fleetDuration + fleetWarmup + fleetCellCost)
}

// fleetRounds runs the fleet cells: in each round, every scenario, layout
// and shape, with the peers in an order that rotates from one group of
// cells to the next. It records the 1-minute load average at the start of
// each round in h.roundLoad.
func (h *harness) fleetRounds() {
	peers := h.fleetPeers()
	for r := range h.cfg.fleetRounds {
		h.settle()
		h.roundLoad = append(h.roundLoad, loadAvg1())
		k := 0
		for _, sc := range fleetScenarios() {
			for _, procs := range []bool{false, true} {
				for _, s := range h.cfg.fleetShapes {
					for _, p := range rotate(peers, r+k) {
						h.runFleetCell(r, sc, procs, s, p)
					}
					k++
				}
			}
		}
	}
}

// maxSettle bounds how long settle waits before a round.
const maxSettle = 2 * time.Minute

// settle waits, with -fleet-settle, until the 1-minute load average is at
// most its value, or maxSettle has passed (the round then starts anyway,
// and its load at start, printed beside the paired figures, says so).
// The harness's own rounds keep a two-CPU machine's load near three; the
// load average falls by about a sixth of the way to the background load
// every ten idle seconds.
func (h *harness) settle() {
	if h.cfg.fleetSettle <= 0 {
		return
	}
	for end := time.Now().Add(maxSettle); time.Now().Before(end); time.Sleep(2 * time.Second) {
		if l := loadAvg1(); math.IsNaN(l) || l <= h.cfg.fleetSettle {
			return
		}
	}
}

// runFleetCell runs round r of one fleet cell and records it.
func (h *harness) runFleetCell(r int, sc fleetScenario, procs bool, s shape, p bench.Peer) {
	defer h.reset()
	if h.fleet == nil {
		h.fleet = map[fleetKey]*fleetCell{}
	}
	key := fleetKey{sc.name, procs, s, p.Name}
	c := h.fleet[key]
	if c == nil {
		c = new(fleetCell)
		h.fleet[key] = c
	}
	var run fleetRun
	var err error
	if procs {
		run, err = h.fleetProcesses(sc, s, p)
	} else {
		run, err = h.fleetInProcess(sc, s, p)
	}
	label := fmt.Sprintf("fleet %s, %s, %s, %s", sc.name, h.layoutName(procs, s), s, p.Name)
	if err != nil {
		c.err = err
		c.lost++
		h.step(label, "failed: "+err.Error())
		return
	}
	run.limit, run.round = sc.limit, r
	c.runs = append(c.runs, run)
	note := ""
	if lo, hi, ok := run.t.idealIn(sc.limit, idealSlot); ok {
		note = fmt.Sprintf(", admitted %d, ideal on the calls made %d–%d", run.t.allowed, lo, hi)
	}
	h.step(label, fmt.Sprintf("%s decisions/s%s%s", grouped(perSec(run.t.decisions(), run.t.elapsed)), run.t.health(), note))
}

// layoutName says where a cell's instances run.
func (h *harness) layoutName(procs bool, s shape) string {
	if !procs {
		return "1 process"
	}
	if n := workerCount(s, h.cfg.fleetProcs); n > 1 {
		return fmt.Sprintf("%d processes", n)
	}
	return "1 worker process"
}

// fleetInProcess measures a fleet whose instances all run in this process.
func (h *harness) fleetInProcess(sc fleetScenario, s shape, p bench.Peer) (fleetRun, error) {
	env := fleetEnv(h.env.Addr)
	lims, closeAll, err := newFleet(s.n, func() (*bench.Built, error) { return h.buildIn(env, p, sc.limit) })
	if err != nil {
		return fleetRun{}, err
	}
	defer closeAll()
	keys := h.keys(sc.nkeys)
	warm := keys
	if sc.warmApart {
		warm = h.keys(sc.nkeys)
	}
	loadAll(lims, warm, s.c, fleetWarmup, 0, 0)
	return h.aroundRedis(func() (*tally, float64, error) {
		cpu0, ok := processCPU()
		t, _ := loadAll(lims, keys, s.c, h.cfg.fleetDuration, sc.slot(), 0)
		cpu1, _ := processCPU()
		if !ok {
			return t, -1, nil
		}
		return t, cpu1 - cpu0, nil
	})
}

// aroundRedis runs measure, which returns its tally and client CPU seconds,
// between two readings of Redis's CPU time.
func (h *harness) aroundRedis(measure func() (*tally, float64, error)) (fleetRun, error) {
	ctx := context.Background()
	r0, err0 := readStats(ctx, h.admin)
	t, ccpu, err := measure()
	if err != nil {
		return fleetRun{}, err
	}
	r1, err1 := readStats(ctx, h.admin)
	run := fleetRun{t: t, clientCPU: ccpu, redisCPU: -1, redisSys: -1}
	if err0 == nil && err1 == nil {
		c := costBetween(r0, r1)
		run.redisCPU, run.redisSys, run.cmds = c.cpu, c.sys, c.byCmd
	}
	return run, nil
}

// newFleet builds n limiters with build, each on a client of its own;
// closeAll releases them all.
func newFleet(n int, build func() (*bench.Built, error)) (lims []bench.Limiter, closeAll func(), err error) {
	var built []*bench.Built
	closeAll = func() {
		for _, b := range built {
			b.Close()
		}
	}
	for range n {
		b, err := build()
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		built = append(built, b)
		lims = append(lims, b.Limiter)
	}
	return lims, closeAll, nil
}

// fleetSummary is a cell's figures: medians over its runs (NaN where
// unknown), the spread of its decisions/s, and counts summed over them.
type fleetSummary struct {
	rate, redisUS, clientUS float64
	redisSysUS              float64            // the kernel's part of redisUS (median of the rounds')
	redisBusy, clientBusy   float64            // median CPUs busy over a round: Redis's (at most 1, one thread) and the limiters' process(es); NaN if unknown
	rateMin, rateMax        float64            // the slowest and the fastest round's decisions/s
	cmdsPer                 map[string]float64 // Redis commands per decision, over the rounds that counted them
	admitted, measured      float64            // median admissions per run, and median seconds measured
	idealLo, idealHi        float64            // median ideal on the calls made (see tally.idealIn); NaN if not counted
	under, over             float64            // the largest shortfall below idealLo and excess over idealHi of a run (0: within), and the largest below idealHi; NaN if not counted
	belowHi                 float64
	p50, p99                time.Duration
	counts                  *tally // calls by outcome, over all runs; no latencies
}

func (c *fleetCell) summary() fleetSummary {
	var rate, redisUS, redisSysUS, clientUS, redisBusy, clientBusy, p50, p99, admitted, measured, lo, hi []float64
	s := fleetSummary{counts: new(tally), under: math.NaN(), over: math.NaN(), belowHi: math.NaN()}
	for _, r := range c.runs {
		f := r.figures()
		rate = append(rate, f.rate)
		redisUS = append(redisUS, f.redisUS)
		redisSysUS = append(redisSysUS, f.redisSysUS)
		clientUS = append(clientUS, f.clientUS)
		redisBusy = append(redisBusy, busy(r.redisCPU, r.t.elapsed))
		clientBusy = append(clientBusy, busy(r.clientCPU, r.t.elapsed))
		p50 = append(p50, float64(r.t.hist.Quantile(0.5)))
		p99 = append(p99, float64(r.t.hist.Quantile(0.99)))
		admitted = append(admitted, float64(r.t.allowed))
		measured = append(measured, r.t.elapsed.Seconds())
		if l, h, ok := r.t.idealIn(r.limit, idealSlot); ok {
			lo, hi = append(lo, float64(l)), append(hi, float64(h))
			a := float64(r.t.allowed)
			s.under = max(nanTo0(s.under), float64(l)-a)
			s.over = max(nanTo0(s.over), a-float64(h))
			s.belowHi = max(nanTo0(s.belowHi), float64(h)-a)
		}
		s.counts.allowed += r.t.allowed
		s.counts.denied += r.t.denied
		s.counts.degraded += r.t.degraded
		s.counts.errs += r.t.errs
	}
	s.rate, s.redisUS, s.clientUS = median(rate), median(redisUS), median(clientUS)
	s.redisSysUS = median(redisSysUS)
	s.redisBusy, s.clientBusy = median(redisBusy), median(clientBusy)
	var counted float64
	cmds := map[string]int64{}
	for _, r := range c.runs {
		if r.cmds != nil {
			counted += float64(r.t.decisions())
			for name, n := range r.cmds {
				cmds[name] += n
			}
		}
	}
	if counted > 0 {
		s.cmdsPer = map[string]float64{}
		for name, n := range cmds {
			s.cmdsPer[name] = float64(n) / counted
		}
	}
	s.rateMin, s.rateMax = math.NaN(), math.NaN()
	if len(rate) > 0 {
		s.rateMin, s.rateMax = slices.Min(rate), slices.Max(rate)
	}
	s.admitted, s.measured = median(admitted), median(measured)
	s.idealLo, s.idealHi = median(lo), median(hi)
	s.p50, s.p99 = time.Duration(median(p50)), time.Duration(median(p99))
	return s
}

// runFigures are one run's decisions/s and CPU µs per decision, Redis's
// (and the kernel's part of it) and the client's; NaN where unknown.
type runFigures struct{ rate, redisUS, redisSysUS, clientUS float64 }

func (r fleetRun) figures() runFigures {
	d := float64(r.t.decisions())
	return runFigures{
		rate:       perSec(r.t.decisions(), r.t.elapsed),
		redisUS:    perDecisionUS(r.redisCPU, d),
		redisSysUS: perDecisionUS(r.redisSys, d),
		clientUS:   perDecisionUS(r.clientCPU, d),
	}
}

// pairing compares two cells of one scenario, layout and shape round by
// round. A round runs the peers of a shape back to back, so the two runs
// of a round are seconds apart and the slow drift of a shared machine
// cancels in their ratio, where it stays in medians taken separately.
type pairing struct {
	rounds           []int   // the rounds whose decisions/s were paired, in order
	rate             float64 // median of the rounds' decisions/s ratios; NaN without a pair
	rateMin, rateMax float64 // the lowest and highest of those ratios; NaN without a pair
	redisUS          float64 // median of the rounds' Redis CPU per decision ratios; NaN without a pair
	redisN           int     // rounds paired for it
	redisUserUS      float64 // the same for Redis's own code (user CPU) alone
	redisSysUS       float64 // and for the kernel's part (system CPU) alone
	clientUS         float64 // the same for client CPU per decision
	clientN          int
}

// pair pairs cell a's runs with cell b's by round: for each round where
// both have a run, a's figure ÷ b's, left out where either is unknown or
// not positive. A round that failed for either cell has no pair.
func pair(a, b *fleetCell) pairing {
	of := map[int]runFigures{}
	for _, r := range b.runs {
		of[r.round] = r.figures()
	}
	var p pairing
	var rate, redisUS, userUS, sysUS, clientUS []float64
	for _, r := range a.runs {
		fb, ok := of[r.round]
		if !ok {
			continue
		}
		fa := r.figures()
		if v := ratio(fa.rate, fb.rate); !math.IsNaN(v) {
			rate = append(rate, v)
			p.rounds = append(p.rounds, r.round)
		}
		if v := ratio(fa.redisUS, fb.redisUS); !math.IsNaN(v) {
			redisUS = append(redisUS, v)
			userUS = append(userUS, ratio(fa.redisUS-fa.redisSysUS, fb.redisUS-fb.redisSysUS))
			sysUS = append(sysUS, ratio(fa.redisSysUS, fb.redisSysUS))
		}
		if v := ratio(fa.clientUS, fb.clientUS); !math.IsNaN(v) {
			clientUS = append(clientUS, v)
		}
	}
	p.rate, p.redisUS, p.clientUS = median(rate), median(redisUS), median(clientUS)
	p.redisUserUS, p.redisSysUS = median(userUS), median(sysUS)
	p.redisN, p.clientN = len(redisUS), len(clientUS)
	p.rateMin, p.rateMax = math.NaN(), math.NaN()
	if len(rate) > 0 {
		p.rateMin, p.rateMax = slices.Min(rate), slices.Max(rate)
	}
	return p
}

// ratio is a ÷ b; NaN unless both are positive (NaN is not).
func ratio(a, b float64) float64 {
	if !(a > 0) || !(b > 0) {
		return math.NaN()
	}
	return a / b
}

// nanTo0 is v, or 0 for NaN.
func nanTo0(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// perDecisionUS is seconds of CPU per decision, in µs; NaN if unknown.
func perDecisionUS(sec, decisions float64) float64 {
	if sec < 0 || decisions == 0 {
		return math.NaN()
	}
	return sec * 1e6 / decisions
}

// busy is CPU seconds over a measured span, as CPUs busy through it; NaN
// if either is unknown.
func busy(sec float64, span time.Duration) float64 {
	if sec < 0 || span <= 0 {
		return math.NaN()
	}
	return sec / span.Seconds()
}

// median returns the median of xs, NaNs left out (the mean of the middle
// two for an even count); NaN if nothing is left.
func median(xs []float64) float64 {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	m := len(v) / 2
	if len(v)%2 == 1 {
		return v[m]
	}
	return (v[m-1] + v[m]) / 2
}
