package main

import (
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/bench"
)

// fleetMetric is one row of a fleet table per shape.
type fleetMetric struct {
	name string
	show func(fleetSummary) string
}

// idealMetric is the row shown only for scenarios set against the ideal
// (fleetScenario.slot).
const idealMetric = "ideal on the calls made"

var fleetMetrics = []fleetMetric{
	{"decisions/s", func(s fleetSummary) string { return orNA(s.rate, grouped) + spread(s) + s.counts.health() }},
	{"Redis CPU µs/decision", func(s fleetSummary) string { return orNA(s.redisUS, twoPlaces) }},
	{"of it in the kernel (used_cpu_sys)", func(s fleetSummary) string { return orNA(s.redisSysUS, twoPlaces) }},
	{"client CPU µs/decision", func(s fleetSummary) string { return orNA(s.clientUS, twoPlaces) }},
	{"CPUs busy, Redis / client", func(s fleetSummary) string {
		return orNA(s.redisBusy, twoPlaces) + " / " + orNA(s.clientBusy, twoPlaces)
	}},
	{"admitted in the measured time", func(s fleetSummary) string {
		return orNA(s.admitted, grouped) + " in " + orNA(s.measured, func(v float64) string { return fmt.Sprintf("%.2f s", v) })
	}},
	{idealMetric, idealOnCalls},
	{"Redis commands per decision", commandsPer},
	{"p50 / p99 µs", func(s fleetSummary) string { return micros(s.p50) + " / " + micros(s.p99) }},
	{"without Redis / failed", func(s fleetSummary) string {
		return grouped(float64(s.counts.degraded)) + " / " + grouped(float64(s.counts.errs))
	}},
}

// idealOnCalls is the range of what a perfect bucket admits of the calls
// a cell made (see tally.idealIn) and, in the worst run, how far the
// admitted count rose above its upper end (+n), or fell below its lower
// end (−n), or else how far below the upper end it stayed (≤ n under).
func idealOnCalls(s fleetSummary) string {
	if math.IsNaN(s.idealLo) {
		return "n/a"
	}
	ideal := grouped(s.idealLo)
	if s.idealHi != s.idealLo {
		ideal += "–" + grouped(s.idealHi)
	}
	var dev string
	switch {
	case s.over > 0:
		dev = fmt.Sprintf("+%.0f above", s.over)
	case s.under > 0:
		dev = fmt.Sprintf("−%.0f below", s.under)
	default:
		dev = fmt.Sprintf("within; ≤ %.0f under the top", s.belowHi)
	}
	return ideal + " (" + dev + ")"
}

// commandsPer lists the Redis commands per decision of a cell, those the
// scripts ran included, by name; commands below one in a thousand
// decisions are summed as "other".
func commandsPer(s fleetSummary) string {
	if s.cmdsPer == nil {
		return "n/a"
	}
	names := slices.Sorted(maps.Keys(s.cmdsPer))
	var parts []string
	other := 0.0
	for _, name := range names {
		if v := s.cmdsPer[name]; v >= 0.001 {
			parts = append(parts, fmt.Sprintf("%s %.3f", name, v))
		} else {
			other += v
		}
	}
	if other > 0 {
		parts = append(parts, fmt.Sprintf("other %.4f", other))
	}
	return strings.Join(parts, ", ")
}

// spread is the slowest and fastest round of a cell, " (min–max)", when
// the rounds differ.
func spread(s fleetSummary) string {
	if math.IsNaN(s.rateMin) || s.rateMin == s.rateMax {
		return ""
	}
	return " (" + grouped(s.rateMin) + "–" + grouped(s.rateMax) + ")"
}

func twoPlaces(v float64) string { return fmt.Sprintf("%.2f", v) }

func orNA(v float64, f func(float64) string) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return f(v)
}

// fleetTables prints the fleet section: one table per key scenario and
// process layout, with sluice's throughput ratios under each.
func (h *harness) fleetTables(out *report) {
	peers := h.fleetPeers()
	out.section("4. Fleet: replicas with a limiter and a client each")
	h.fleetIntro(out)
	out.printf("Load average (1 min) at the start of each round: %s.\n\n", h.roundLoads())
	head := []string{"instances × callers"}
	for _, p := range peers {
		head = append(head, p.Name)
	}
	sub := 'a'
	for _, sc := range fleetScenarios() {
		for _, procs := range []bool{false, true} {
			out.subsection(fmt.Sprintf("4%c. %s, %s", sub, sc.title, h.layoutTitle(procs)))
			sub++
			out.table(head, h.fleetRows(sc.name, procs, peers))
			h.fleetFailures(out, sc.name, procs, peers)
			h.fleetRatios(out, sc.name, procs, peers)
		}
	}
}

func (h *harness) fleetIntro(out *report) {
	out.printf("N × C is N limiter instances, each built by the library's constructor on a go-redis client of its own, "+
		"each driven by C callers calling `Allow` back to back: replicas of a service with one or two requests in flight each, "+
		"down to one replica with 64. Every client is configured as docs/production.md recommends "+
		"(PoolSize %d, MinIdleConns %d, %[3]s dial, read, write and pool timeouts, one dial attempt, MaxRetries -1, ContextTimeoutEnabled, "+
		"no CLIENT SETINFO or maintenance-notification handshake), and sluice's budget is %[6]s, every library's only bound here: "+
		"decisions it made without Redis are counted in the last row, never as decisions. %[7]s"+
		"In *one process* the instances are goroutines of this process; in *worker processes* they are spread over min(N, %[4]d) "+
		"copies of this program, which measure together once all have warmed up, on the CPUs this process was given (%[5]s). "+
		"`floor` is not a limiter: one EVALSHA per decision of a script that reads TIME, GETs the key and SETs it with PX, "+
		"the least any limiter that keeps its state in Redis on Redis's clock pays per call. "+
		"go-zero is left out: it keeps one client per address per process, so its instances cannot have one each.\n\n",
		bench.ProductionPoolSize, bench.ProductionMinIdle, bench.ProductionTimeout, h.cfg.fleetProcs, h.workerPlaceNote(), budgetNote(), ownConnsNote())
	out.printf("Each cell: Redis flushed, fresh instances, %s of warm-up on the same keys, then %s measured; "+
		"%d round(s), the peers in an order that rotates from one shape to the next. "+
		"Each figure is the median over the rounds, taken separately, with the slowest and fastest round's decisions/s beside it; calls without Redis or failed are totals over the rounds. "+
		"Redis CPU is the change in INFO cpu (used_cpu_user + used_cpu_sys) over the measured part, with the kernel's part (used_cpu_sys: reading requests, writing replies, waiting on sockets, paid per call whatever the command does) on a row of its own; Redis commands the change in INFO commandstats calls (the scripts' own commands included, the harness's INFO left out); client CPU is getrusage of this process (one process) "+
		"or the sum of the workers' own (worker processes), over the measured part; both per decision. "+
		"CPUs busy is the same CPU time over the measured time: Redis near 1.00 (one thread, one core) bounds the cell by Redis, "+
		"the client near the CPUs the limiters have (one in the worker layout) bounds it by the clients. "+
		"Under each table, floor's slowest round ÷ redis_rate's median is what one script call per decision at the least cost showed in the same run, "+
		"beside sluice's own. "+
		"Latency is per call, as the caller sees it.\n\n"+
		"*Paired* figures come from rounds, not medians: a round runs every peer of a shape one after another, "+
		"so sluice's run and redis_rate's (or floor's) in the same round are seconds apart and share the machine's state at that moment. "+
		"Dividing the one by the other within each round cancels the slow drift of a shared machine (other work starting or stopping), "+
		"which medians taken separately keep. The paired line gives the median of those per-round ratios, "+
		"the lowest and highest for decisions/s, and how many rounds paired: a round lost by either peer, "+
		"or whose CPU was unknown, has no pair. A CPU ratio below 1× means sluice spent less per decision. "+
		"Redis's ratio is split too: its own code (user CPU, where a script's instructions are) and the kernel (system CPU), each a median of per-round ratios. "+
		"Beside it is the highest 1-minute load average at the start of the rounds paired, so a reader can tell whether they began on a quiet machine.\n\n",
		fleetWarmup, h.cfg.fleetDuration, h.cfg.fleetRounds)
}

// budgetNote says what sluice's budget is in the fleet, and where it
// came from when $SLUICE_BENCH_BUDGET set it.
// ownConnsNote says whether sluice sends its lone decisions on
// connections of its own (core.WithOwnConnections, docs/production.md's
// advice for a fleet) or through its client's pool ($OwnConnsEnv=0).
func ownConnsNote() string {
	if os.Getenv(bench.OwnConnsEnv) == "0" {
		return fmt.Sprintf("sluice sends every decision through its client's pool (%s=0, not docs/production.md's advice). ", bench.OwnConnsEnv)
	}
	return "sluice sends a decision that goes alone on a few connections of its own (core.WithOwnConnections, as docs/production.md advises for a fleet's replicas), the others through their client's pool. "
}

func budgetNote() string {
	b := bench.ProductionBudget()
	if os.Getenv(bench.BudgetEnv) != "" && b != bench.ProductionTimeout {
		return fmt.Sprintf("%v (set by %s; the client's timeouts stay %v)", b, bench.BudgetEnv, bench.ProductionTimeout)
	}
	return fmt.Sprintf("the same %v", b)
}

func (h *harness) workerPlaceNote() string {
	if h.workerPlace == "" {
		return "not recorded"
	}
	return "workers on " + h.workerPlace
}

func (h *harness) layoutTitle(procs bool) string {
	if procs {
		return fmt.Sprintf("worker processes (min(N, %d))", h.cfg.fleetProcs)
	}
	return "one process"
}

// fleetRows makes one row per shape and metric, one column per peer.
func (h *harness) fleetRows(scenario string, procs bool, peers []bench.Peer) [][]string {
	var rows [][]string
	counted := false
	for _, sc := range allFleetScenarios() {
		if sc.name == scenario {
			counted = sc.slot() > 0
		}
	}
	for _, s := range h.cfg.fleetShapes {
		for _, m := range fleetMetrics {
			if m.name == idealMetric && !counted {
				continue
			}
			row := []string{s.String() + " " + m.name}
			for _, p := range peers {
				c := h.fleet[fleetKey{scenario, procs, s, p.Name}]
				if c == nil || len(c.runs) == 0 {
					row = append(row, "n/a")
					continue
				}
				row = append(row, m.show(c.summary()))
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// fleetFailures lists the rounds of a table's cells that failed, and why.
func (h *harness) fleetFailures(out *report, scenario string, procs bool, peers []bench.Peer) {
	var lines []string
	for _, s := range h.cfg.fleetShapes {
		for _, p := range peers {
			if c := h.fleet[fleetKey{scenario, procs, s, p.Name}]; c != nil && c.lost > 0 {
				lines = append(lines, fmt.Sprintf("- %s at %s: %d of %d round(s) failed: %v\n", p.Name, s, c.lost, c.lost+len(c.runs), c.err))
			}
		}
	}
	if len(lines) > 0 {
		out.printf("%s\n", strings.Join(lines, ""))
	}
}

// fleetRatios prints, per shape, sluice's decisions/s divided by
// redis_rate's, by the fastest other library's (neither a sluice variant
// nor floor) and by floor's.
func (h *harness) fleetRatios(out *report, scenario string, procs bool, peers []bench.Peer) {
	var lines []string
	for _, s := range h.cfg.fleetShapes {
		if l := h.ratioLine(scenario, procs, s, peers); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > 0 {
		out.printf("sluice's decisions/s:\n\n%s\n", strings.Join(lines, ""))
	}
	lines = lines[:0]
	for _, s := range h.cfg.fleetShapes {
		if l := h.pairedLine(scenario, procs, s); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > 0 {
		out.printf("sluice ÷ the same round's run of another peer, paired (median over the rounds; decisions/s with the lowest–highest round):\n\n%s\n", strings.Join(lines, ""))
	}
}

// pairedLine is fleetRatios' paired line for one shape: sluice against
// redis_rate and against floor, round by round (see pairing), and the
// highest load average at the start of the rounds paired; "" without
// sluice or without a pair.
func (h *harness) pairedLine(scenario string, procs bool, s shape) string {
	own := h.fleet[fleetKey{scenario, procs, s, "sluice"}]
	if own == nil {
		return ""
	}
	var parts []string
	used := map[int]bool{}
	for _, name := range []string{"redis_rate", "floor"} {
		other := h.fleet[fleetKey{scenario, procs, s, name}]
		if other == nil {
			continue
		}
		p := pair(own, other)
		if len(p.rounds) == 0 {
			continue
		}
		for _, r := range p.rounds {
			used[r] = true
		}
		parts = append(parts, fmt.Sprintf("÷ %s over %d round(s): decisions/s %s (%s–%s), Redis CPU/decision %s (its own code %s, the kernel %s), client CPU/decision %s",
			name, len(p.rounds), times(p.rate), orNA(p.rateMin, twoPlaces), orNA(p.rateMax, twoPlaces),
			pairedCPU(p.redisUS, p.redisN, len(p.rounds)), times(p.redisUserUS), times(p.redisSysUS),
			pairedCPU(p.clientUS, p.clientN, len(p.rounds))))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("- %s: %s; highest load average (1 min) at the start of those rounds %s\n",
		s, strings.Join(parts, "; "), h.maxRoundLoad(slices.Sorted(maps.Keys(used))))
}

// times formats a ratio as 1.04×; n/a for NaN.
func times(v float64) string {
	return orNA(v, func(v float64) string { return fmt.Sprintf("%.2f×", v) })
}

// pairedCPU formats a paired CPU ratio, with its count of rounds when it
// is not the same as the decisions/s ratio's (CPU unknown in some).
func pairedCPU(v float64, n, of int) string {
	if n == of || n == 0 {
		return times(v)
	}
	return fmt.Sprintf("%s (%d round(s))", times(v), n)
}

// maxRoundLoad is the highest 1-minute load average at the start of the
// given rounds, "n/a" where none was read.
func (h *harness) maxRoundLoad(rounds []int) string {
	hi := math.NaN()
	for _, r := range rounds {
		if r < len(h.roundLoad) && !math.IsNaN(h.roundLoad[r]) {
			hi = max(nanTo0(hi), h.roundLoad[r])
		}
	}
	return orNA(hi, twoPlaces)
}

// roundLoads lists the 1-minute load average at the start of each fleet
// round, "n/a" where it could not be read.
func (h *harness) roundLoads() string {
	var l []string
	for _, v := range h.roundLoad {
		l = append(l, orNA(v, twoPlaces))
	}
	if len(l) == 0 {
		return "n/a"
	}
	return strings.Join(l, ", ")
}

// ratioLine is fleetRatios' line for one shape; "" without sluice.
func (h *harness) ratioLine(scenario string, procs bool, s shape, peers []bench.Peer) string {
	rate := func(name string) float64 {
		if c := h.fleet[fleetKey{scenario, procs, s, name}]; c != nil && len(c.runs) > 0 {
			return c.summary().rate
		}
		return math.NaN()
	}
	c := h.fleet[fleetKey{scenario, procs, s, "sluice"}]
	if c == nil || len(c.runs) == 0 {
		return ""
	}
	own := c.summary()
	var parts []string
	if r := rate("redis_rate"); r > 0 {
		parts = append(parts, fmt.Sprintf("÷ redis_rate %.2f× (slowest round ÷ redis_rate's median %.2f×)", own.rate/r, own.rateMin/r))
	}
	best, bestName := 0.0, ""
	for _, p := range peers {
		if r := rate(p.Name); !strings.HasPrefix(p.Name, "sluice") && !p.FleetOnly && r > best {
			best, bestName = r, p.Name
		}
	}
	if best > 0 {
		parts = append(parts, fmt.Sprintf("÷ fastest other library (%s) %.2f×", bestName, own.rate/best))
	}
	if r := rate("floor"); r > 0 {
		parts = append(parts, fmt.Sprintf("÷ floor %.2f×", own.rate/r))
	}
	if f, r := h.fleet[fleetKey{scenario, procs, s, "floor"}], rate("redis_rate"); f != nil && len(f.runs) > 0 && r > 0 {
		// What one script call per decision at the least cost could show
		// in this run: floor's own slowest round against redis_rate's
		// median. Below 1.05×, no limiter making one call per decision
		// could have met issue 33's target in this cell.
		parts = append(parts, fmt.Sprintf("floor's slowest round ÷ redis_rate's median %.2f×", f.summary().rateMin/r))
	}
	if len(parts) == 0 {
		return ""
	}
	marks := strings.Replace(own.counts.health(), " (", " (sluice: ", 1)
	return fmt.Sprintf("- %s: %s%s\n", s, strings.Join(parts, ", "), marks)
}

// fleetHeader describes the fleet settings for the run's header.
func (h *harness) fleetHeader() []string {
	var shapes []string
	for _, s := range h.cfg.fleetShapes {
		shapes = append(shapes, s.String())
	}
	return []string{"fleet", fmt.Sprintf("shapes %s (instances × callers); %s measured per cell after %s of warm-up, %d round(s), median shown; worker processes min(N, %d)",
		strings.Join(shapes, ", "), h.cfg.fleetDuration, fleetWarmup, h.cfg.fleetRounds, h.cfg.fleetProcs)}
}
