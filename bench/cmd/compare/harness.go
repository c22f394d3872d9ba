package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bench"
)

type harness struct {
	cfg      config
	pinned   pinning
	env      bench.Env
	admin    *redis.Client
	own      bool     // the harness started this Redis, and may flush it
	redisCmd []string // how it was started
	peers    []bench.Peer
	runID    string
	seq      int // keys of each cell are fresh
	done     int // cells finished, for progress
	total    int // cells planned

	mu       sync.Mutex
	mapNotes map[string]string // peer → how a limit was mapped
	naNotes  map[string]string // peer + limit → why it could not be built

	// Throughput and deny cells, by scenario, callers and peer.
	cells map[cellKey]*cell

	// Fleet cells, and where the fleet's worker processes ran.
	fleet       map[fleetKey]*fleetCell
	workerPlace string
	roundLoad   []float64 // the 1-minute load average at the start of each fleet round; NaN if unknown
}

type cellKey struct {
	scenario string
	callers  int
	peer     string
}

// cell is one limiter's measurement in one scenario.
type cell struct {
	err  error // the limiter could not be built for the scenario's limit
	t    *tally
	cost *redisCost // nil for in-process limiters
	rt   int64      // round trips the client sent
	sent int64      // commands the client sent
	ccpu float64    // CPU seconds this process used while measuring; -1 if unknown
}

const (
	scHot  = "hot"
	scMany = "10k"
	scDeny = "deny"
)

// reset empties a Redis the harness owns, so no cell pays for another's
// keys, and collects garbage so no cell pays for another's allocations.
func (h *harness) reset() {
	if h.own {
		_ = h.admin.FlushAll(context.Background()).Err()
	}
	runtime.GC()
}

// keys returns n fresh keys of equal length.
func (h *harness) keys(n int) []string {
	return makeKeys(h.keyPrefix(), n)
}

// keyPrefix returns a prefix no cell has used yet.
func (h *harness) keyPrefix() string {
	h.seq++
	return "b" + h.runID + ":" + strconv.Itoa(h.seq) + ":"
}

// makeKeys returns n keys of equal length under prefix.
func makeKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%05d", prefix, i)
	}
	return keys
}

func (h *harness) build(p bench.Peer, lim bench.Limit) (*bench.Built, error) {
	return h.buildIn(h.env, p, lim)
}

// buildIn builds p's limiter for lim in env, and keeps a note of how the
// limit was mapped onto the library, or why it could not be.
func (h *harness) buildIn(env bench.Env, p bench.Peer, lim bench.Limit) (*bench.Built, error) {
	b, err := p.New(env, lim)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		if h.naNotes == nil {
			h.naNotes = map[string]string{}
		}
		h.naNotes[p.Name+" at "+lim.String()] = err.Error()
		return nil, err
	}
	if b.Note != "" {
		if h.mapNotes == nil {
			h.mapNotes = map[string]string{}
		}
		h.mapNotes[p.Name+" at "+lim.String()] = b.Note
	}
	return b, nil
}

// rotate returns peers starting at the i-th, so that no limiter always runs
// first or last in its round.
func rotate(peers []bench.Peer, i int) []bench.Peer {
	if len(peers) == 0 {
		return nil
	}
	i %= len(peers)
	return append(slices.Clone(peers[i:]), peers[:i]...)
}

func (h *harness) peersFor(scenario string) []bench.Peer {
	var out []bench.Peer
	for _, p := range h.peers {
		if !p.FleetOnly && (!p.DenyOnly || scenario == scDeny) {
			out = append(out, p)
		}
	}
	return out
}

// plan counts the cells to run and returns about how long the run will take.
func (h *harness) plan() time.Duration {
	cell := h.cfg.duration + time.Duration(h.cfg.rounds)*(h.cfg.warmup+50*time.Millisecond)
	var d time.Duration
	if h.cfg.sections["throughput"] {
		n := 2 * len(h.cfg.callers) * len(h.peersFor(scHot))
		h.total += n * h.cfg.rounds
		d += time.Duration(n) * cell
	}
	if h.cfg.sections["deny"] {
		n := len(h.cfg.callers) * len(h.peersFor(scDeny))
		h.total += n * h.cfg.rounds
		d += time.Duration(n) * cell
	}
	if h.cfg.sections["accuracy"] {
		acc := time.Duration(len(h.peersFor(scHot)))*h.cfg.hammerFor + subDuration
		d += max(acc, slowResume(h.cfg.slowProbes))
	}
	if h.cfg.sections["fleet"] {
		d += h.fleetPlan()
	}
	return d
}

// measure runs one cell: a fresh limiter for lim, warmed up on fresh keys,
// then measured for the configured duration with Redis's and the client's
// counters read around the measured part only.
func (h *harness) measure(scenario string, p bench.Peer, lim bench.Limit, nkeys, callers int) {
	defer h.reset()
	if h.cells == nil {
		h.cells = map[cellKey]*cell{}
	}
	c := h.cells[cellKey{scenario, callers, p.Name}]
	if c == nil {
		c = &cell{t: new(tally)}
		h.cells[cellKey{scenario, callers, p.Name}] = c
	}
	b, err := h.build(p, lim)
	if err != nil {
		c.err = err
		h.progress(scenario, callers, p.Name, "n/a: "+err.Error())
		return
	}
	defer b.Close()
	keys := h.keys(nkeys)
	load(b.Limiter, keys, callers, h.cfg.warmup, 0)
	if scenario == scDeny {
		drain(b.Limiter, keys[0], lim)
	}

	ctx := context.Background()
	var before redisStats
	if p.Redis {
		before, err = readStats(ctx, h.admin)
	}
	rt0, sent0 := b.Traffic.Snapshot()
	cpu0, cpuOK := processCPU()
	t, _ := load(b.Limiter, keys, callers, h.cfg.duration/time.Duration(h.cfg.rounds), 0)
	cpu1, _ := processCPU()
	rt1, sent1 := b.Traffic.Snapshot()
	if cpuOK && c.ccpu >= 0 {
		c.ccpu += cpu1 - cpu0
	} else {
		c.ccpu = -1
	}
	c.rt += rt1 - rt0
	c.sent += sent1 - sent0
	c.t.add(t)
	c.t.elapsed += t.elapsed
	c.t.sending += t.sending
	if p.Redis && err == nil {
		if after, err := readStats(ctx, h.admin); err == nil {
			if c.cost == nil {
				c.cost = &redisCost{}
			}
			c.cost.add(costBetween(before, after))
		}
	}
	h.progress(scenario, callers, p.Name, fmt.Sprintf("%s decisions/s%s", grouped(perSec(t.decisions(), t.elapsed)), t.health()))
}

// drain makes sure a hot key's bucket is empty, however few calls the
// warm-up managed: it asks until it is denied (at most twice the burst).
func drain(lim bench.Limiter, key string, l bench.Limit) {
	ctx := context.Background()
	for range 2 * l.Burst {
		if ok, err := lim.Allow(ctx, key); err == nil && !ok {
			return
		}
	}
}

func (h *harness) progress(scenario string, callers int, peer, what string) {
	h.step(fmt.Sprintf("%s, callers %d, %s", scenario, callers, peer), what)
}

// step reports one finished cell on stderr.
func (h *harness) step(cell, what string) {
	h.done++
	fmt.Fprintf(os.Stderr, "[%d/%d] %s: %s\n", h.done, h.total, cell, what)
}

// throughput runs section 1: the hot key and 10k keys under a limit that
// never denies, round-robin over the limiters within each scenario and
// number of callers.
func (h *harness) throughput(round int) {
	for i, sc := range []struct {
		name  string
		nkeys int
	}{{scHot, hotKeys}, {scMany, manyKeys}} {
		for j, n := range h.cfg.callers {
			for _, p := range rotate(h.peersFor(sc.name), round+i*len(h.cfg.callers)+j) {
				h.measure(sc.name, p, highLimit, sc.nkeys, n)
			}
		}
	}
}

// measureRounds runs the throughput and deny cells, the whole set once per
// round, so that each cell's measured time is spread over the run.
func (h *harness) measureRounds() {
	for r := 0; r < h.cfg.rounds; r++ {
		if h.cfg.sections["throughput"] {
			h.throughput(r)
		}
		if h.cfg.sections["deny"] {
			h.deny(r)
		}
	}
}

func (h *harness) throughputTables(out *report) {
	out.section("1. Throughput and latency")
	per := h.cfg.duration / time.Duration(h.cfg.rounds)
	out.printf("Limit %s per key, never reached in a cell, so nothing is denied and the numbers are the store's. "+
		"Each cell is measured for %s in all: %d round(s) of %s, the whole set of cells once per round, "+
		"each time with a fresh limiter and %s of warm-up on the same keys. "+
		"Decisions/s counts decisions made by Redis (or by the in-process limiter for the local ones); "+
		"a cell marks the share of calls that failed or were decided without Redis.\n\n",
		highLimit, h.cfg.duration, h.cfg.rounds, per, h.cfg.warmup)
	h.scenarioTables(out, scHot, "1a. One hot key")
	h.scenarioTables(out, scMany, "1b. 10,000 keys, uniform random")
}

func (h *harness) scenarioTables(out *report, scenario, title string) {
	peers := h.peersFor(scenario)
	out.subsection(title + ": decisions/s")
	out.table(h.callersHeader(), h.rows(peers, scenario, func(c *cell) string {
		return grouped(perSec(c.t.decisions(), c.t.elapsed)) + c.t.health()
	}))
	out.subsection(title + ": latency p50 / p99 / p99.9 (µs)")
	out.table(h.callersHeader(), h.rows(peers, scenario, func(c *cell) string {
		return latencies(&c.t.hist)
	}))
}

func (h *harness) callersHeader() []string {
	head := []string{"limiter"}
	for _, n := range h.cfg.callers {
		if n == 1 {
			head = append(head, "1 caller")
		} else {
			head = append(head, strconv.Itoa(n)+" callers")
		}
	}
	return head
}

// rows makes one row per peer and one column per number of callers.
func (h *harness) rows(peers []bench.Peer, scenario string, show func(*cell) string) [][]string {
	var rows [][]string
	for _, p := range peers {
		row := []string{p.Name}
		for _, n := range h.cfg.callers {
			c := h.cells[cellKey{scenario, n, p.Name}]
			switch {
			case c == nil:
				row = append(row, "")
			case c.err != nil:
				row = append(row, "n/a")
			default:
				row = append(row, show(c))
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// deny runs the deny-heavy scenario: one hot key far over a realistic limit.
func (h *harness) deny(round int) {
	for i, n := range h.cfg.callers {
		for _, p := range rotate(h.peersFor(scDeny), round+i) {
			h.measure(scDeny, p, denyLimit, hotKeys, n)
		}
	}
}

func (h *harness) denyTables(out *report) {
	peers := h.peersFor(scDeny)
	out.subsection(fmt.Sprintf("1c. One hot key over its limit (%s): decisions/s, admitted/s", denyLimit))
	out.printf("The warm-up (and, if it was too short, a drain until the first denial) empties the bucket, so the measured part is the steady state of a flooded key: "+
		"about %.0f admissions a second, everything else denied. Cells read `decisions/s (admitted/s)`; "+
		"admitted/s is over the time calls were being sent, without the tail of the last calls in flight. "+
		"Answers from sluice's deny cache count as decisions: they are what its callers get, and the cache never denies what Redis would admit.\n\n", denyLimit.PerSecondRate())
	out.table(h.callersHeader(), h.rows(peers, scDeny, func(c *cell) string {
		return fmt.Sprintf("%s (%.0f)%s", grouped(perSec(c.t.decisions(), c.t.elapsed)), perSec(c.t.allowed, c.t.sending), c.t.health())
	}))
	out.subsection("1c. One hot key over its limit: latency p50 / p99 / p99.9 (µs)")
	out.table(h.callersHeader(), h.rows(peers, scDeny, func(c *cell) string {
		return latencies(&c.t.hist)
	}))
}

// clientCPU formats a cell's process CPU per decision.
func clientCPU(c *cell, decisions float64) string {
	if c.ccpu < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", c.ccpu*1e6/decisions)
}

// costTables prints section 2 from the cells at the cost callers.
func (h *harness) costTables(out *report) {
	out.section(fmt.Sprintf("2. Redis cost per decision (%d callers)", h.cfg.costCallers))
	out.printf("From the cells above. Redis CPU is the change in `used_cpu_sys + used_cpu_user` (INFO cpu) over the measured part, per decision. " +
		"Redis commands is the change in INFO commandstats calls, commands run inside scripts included (Redis counts them) and INFO itself excluded. " +
		"Round trips and commands sent are counted on the limiter's go-redis client with a hook: a pipeline is one round trip. " +
		"Client CPU is the user and system time of this whole process (getrusage) over the measured part, per decision: the limiter, its Redis client and the harness's callers together. " +
		"A side that is not near one CPU-second per second is not what limits the cell; then the round trips' latency is.\n\n")
	head := []string{"limiter", "Redis CPU µs/decision", "client CPU µs/decision", "Redis commands/decision", "round trips/decision", "commands sent/decision", "commands Redis ran, per decision"}
	for _, sc := range []struct{ name, title string }{
		{scHot, "2a. One hot key, limit never reached"},
		{scMany, "2b. 10,000 keys, limit never reached"},
		{scDeny, fmt.Sprintf("2c. One hot key over its limit (%s)", denyLimit)},
	} {
		var rows [][]string
		for _, p := range h.peersFor(sc.name) {
			if !p.Redis {
				continue
			}
			c := h.cells[cellKey{sc.name, h.cfg.costCallers, p.Name}]
			if c == nil {
				continue
			}
			if c.err != nil || c.cost == nil || c.t.decisions() == 0 {
				rows = append(rows, []string{p.Name, "n/a", "", "", "", "", ""})
				continue
			}
			d := float64(c.t.decisions())
			rows = append(rows, []string{
				p.Name + c.t.health(),
				fmt.Sprintf("%.2f", c.cost.cpu*1e6/d),
				clientCPU(c, d),
				fmt.Sprintf("%.2f", float64(c.cost.cmds)/d),
				fmt.Sprintf("%.2f", float64(c.rt)/d),
				fmt.Sprintf("%.2f", float64(c.sent)/d),
				breakdown(c.cost.sorted(), d),
			})
		}
		if len(rows) == 0 {
			continue
		}
		out.subsection(sc.title)
		out.table(head, rows)
	}
}

// breakdown lists the commands Redis ran, per decision, most frequent first.
func breakdown(cmds []cmdCount, decisions float64) string {
	var s string
	for i, c := range cmds {
		per := float64(c.n) / decisions
		if i >= 6 || per < 0.005 {
			break
		}
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%s %.2f", c.name, per)
	}
	return s
}

// accuracy runs section 3. The slow-bucket case runs in the background for
// its whole span (it sends one request a second per limiter) while the
// hammered case and then the sub-token case run.
func (h *harness) accuracy(out *report) {
	peers := h.peersFor(scHot)
	type result struct {
		t       *tally
		lo, hi  int // what a perfect bucket admits, calls placed at their send and at their return times
		nominal float64
		offered uint64
		slowest time.Duration
		silence time.Duration
		tries   int
		err     error
	}
	slow := make([]result, len(peers))
	var slowWG sync.WaitGroup
	for i, p := range peers {
		b, err := h.build(p, slowLimit)
		if err != nil {
			slow[i].err = err
			continue
		}
		key := h.keys(1)[0]
		slowWG.Add(1)
		go func(r *result) {
			defer slowWG.Done()
			defer b.Close()
			t, tl := slowBucket(b.Limiter, key, h.cfg.slowProbes)
			r.t, r.offered = t, t.calls()
			r.lo, r.hi = tl.ideal(slowLimit)
			r.slowest, _ = tl.slowest()
		}(&slow[i])
	}
	fmt.Fprintf(os.Stderr, "accuracy: slow bucket running for %s in the background\n", slowResume(h.cfg.slowProbes))

	// The sub-token case runs before the hammered one: go-zero's limiter for
	// the hammered case fails on Redis, and go-zero's circuit breaker, shared
	// by every go-zero limiter on the address, would then refuse the calls
	// of the next case too.
	sub := make([]result, len(peers))
	var subWG sync.WaitGroup
	for i, p := range peers {
		b, err := h.build(p, subLimit)
		if err != nil {
			sub[i].err = err
			continue
		}
		key := h.keys(1)[0]
		subWG.Add(1)
		go func(r *result) {
			defer subWG.Done()
			defer b.Close()
			t, tl := paced(b.Limiter, key, subInterval, subDuration)
			r.t, r.offered = t, t.calls()
			r.lo, r.hi = tl.ideal(subLimit)
			r.slowest, r.silence = tl.slowest()
		}(&sub[i])
	}
	subWG.Wait()
	fmt.Fprintln(os.Stderr, "accuracy: sub-token client done")

	// A silence (no reply at all) longer than the bucket's Burst/Rate costs
	// any limiter tokens. On a busy machine that happens now and then, so
	// such a run is repeated, up to hammerTries times in all, and the run
	// with the shortest silence is reported.
	bucketTime := time.Duration(float64(hammerLimit.Burst) / hammerLimit.PerSecondRate() * float64(time.Second))
	hammer := make([]result, len(peers))
	for _, p := range rotate(peers, 0) {
		i := slices.IndexFunc(peers, func(q bench.Peer) bool { return q.Name == p.Name })
		for try := 1; try <= hammerTries; try++ {
			b, err := h.build(p, hammerLimit)
			if err != nil {
				hammer[i].err = err
				break
			}
			// Warm the limiter's client on another key first: a fresh
			// client dials its connections during the first calls, and
			// while it does the measured key's full bucket would discard
			// the tokens that come in, which no limiter can be blamed for.
			load(b.Limiter, h.keys(1), hammerCallers, hammerWarmup, 0)
			t, start := load(b.Limiter, h.keys(1), hammerCallers, h.cfg.hammerFor, hammerSlot)
			b.Close()
			r := result{t: t, nominal: hammerLimit.Ideal(t.lastSend.Sub(start)), offered: t.calls(),
				slowest: t.hist.Max(), silence: longestSilence(t.backIn, hammerSlot)}
			fmt.Fprintf(os.Stderr, "accuracy: hammered, %s (try %d): admitted %d, ideal %.0f, longest silence %s\n",
				p.Name, try, t.allowed+t.admitDeg, r.nominal, r.silence)
			if try == 1 || r.silence < hammer[i].silence {
				hammer[i] = r
			}
			hammer[i].tries = try
			if r.silence <= bucketTime {
				break
			}
		}
	}
	fmt.Fprintln(os.Stderr, "accuracy: waiting for the slow bucket")
	slowWG.Wait()
	h.reset()

	out.section("3. Accuracy against an ideal token bucket")
	out.printf("Admitted counts every admission, including any a library made without Redis; " +
		"the column after it says how many calls were decided without Redis or failed. " +
		"Error is admitted − ideal, in tokens: positive lets too much through, negative refuses what the limit allows. " +
		"Slowest call and longest silence (the longest time in which no call returned) show how much the machine got in the way.\n\n")
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
	}
	na := func(name string, n int) []string {
		row := []string{name, "n/a"}
		for len(row) < n {
			row = append(row, "")
		}
		return row
	}
	admittedOf := func(r result) int { return int(r.t.allowed + r.t.admitDeg) }
	// rangeRows are for the single-client cases, whose ideal is a range.
	rangeRows := func(rs []result, silence bool) [][]string {
		var rows [][]string
		for i, p := range peers {
			r := rs[i]
			n := 7
			if silence {
				n = 8
			}
			if r.err != nil {
				rows = append(rows, na(p.Name, n))
				continue
			}
			admitted := admittedOf(r)
			ideal := grouped(float64(r.lo))
			if r.hi != r.lo {
				ideal += "–" + grouped(float64(r.hi))
			}
			e := 0
			switch {
			case admitted < r.lo:
				e = admitted - r.lo
			case admitted > r.hi:
				e = admitted - r.hi
			}
			row := []string{p.Name, grouped(float64(r.offered)), grouped(float64(admitted)),
				fmt.Sprintf("%d / %d", r.t.degraded, r.t.errs), ideal, fmt.Sprintf("%+d", e), ms(r.slowest)}
			if silence {
				row = append(row, ms(r.silence))
			}
			rows = append(rows, row)
		}
		return rows
	}

	out.subsection(fmt.Sprintf("3a. Hammered key: %d callers for %s at %s", hammerCallers, h.cfg.hammerFor, hammerLimit))
	out.printf("Ideal = Burst + Rate·t, t from the callers' start to the last call's start. "+
		"Calls still in flight at the end may take the few tokens that come in while they travel (about Rate × latency). "+
		"A silence longer than Burst/Rate (%s) costs any limiter up to Rate × (silence − %s) tokens, so a run with one is repeated "+
		"(up to %d runs) and the one with the shortest silence is shown; † marks a row whose silence was still longer.\n\n",
		bucketTime, bucketTime, hammerTries)
	var rows [][]string
	for i, p := range peers {
		r := hammer[i]
		if r.err != nil {
			rows = append(rows, na(p.Name, 9))
			continue
		}
		admitted := admittedOf(r)
		name := p.Name
		if r.silence > bucketTime {
			name += " †"
		}
		rows = append(rows, []string{name, grouped(float64(r.offered)), grouped(float64(admitted)),
			fmt.Sprintf("%d / %d", r.t.degraded, r.t.errs), fmt.Sprintf("%.1f", r.nominal),
			fmt.Sprintf("%+.1f", float64(admitted)-r.nominal), ms(r.slowest), ms(r.silence), strconv.Itoa(r.tries)})
	}
	out.table([]string{"limiter", "offered", "admitted", "without Redis / failed", "ideal", "error (tokens)", "slowest call (ms)", "longest silence (ms)", "runs"}, rows)

	head := []string{"limiter", "offered", "admitted", "without Redis / failed", "ideal", "error (tokens)", "slowest call (ms)"}
	resume := slowResume(h.cfg.slowProbes)
	out.subsection(fmt.Sprintf("3b. Slow bucket: %s, emptied, one request a second for %ds, idle, then %d at once at %s",
		slowLimit, h.cfg.slowProbes, slowLimit.Burst, resume))
	out.printf("%d requests back to back empty the bucket. A token then comes back every %s and is taken by the next "+
		"once-a-second probe: a perfect bucket admits %d of the probes. After the last probe the key is left alone until %s, "+
		"when %d requests at once find the tokens that came back meanwhile. "+
		"Ideal is what a perfect bucket admits for the requests as they were made, placed once at their send times and once at their reply times "+
		"(a range when the two differ). "+
		"A refill rounded down to whole tokens on every request, with the clock restarted, admits no probe; "+
		"a key that expires before its bucket is full again (a fixed TTL) hands out a full burst at the end.\n\n",
		slowLimit.Burst, time.Duration(float64(slowLimit.Period)/float64(slowLimit.Rate)),
		int(float64(h.cfg.slowProbes)*slowLimit.PerSecondRate()), resume, slowLimit.Burst)
	out.table(head, rangeRows(slow, false))

	out.subsection(fmt.Sprintf("3c. Sub-token client: one request every %s for %s at %s", subInterval, subDuration, subLimit))
	out.printf("Each request finds half a token more in the bucket. A request that is late for its slot is sent at once. " +
		"Ideal is computed as in 3b; when no request is late it is Burst + Rate·t, t from the first request to the last " +
		"(a silence of more than a second, Burst/Rate, would lower it). " +
		"A refill that is rounded down per request and restarts the clock never refills: " +
		"it admits the burst and then nothing, about a third of the ideal. The eight clients run at the same time.\n\n")
	out.table(append(slices.Clone(head), "longest silence (ms)"), rangeRows(sub, true))
}

// slowBucket empties a full bucket with Burst requests, probes it once a
// second, leaves it alone for half as long again, and then asks for Burst at
// once.
func slowBucket(lim bench.Limiter, key string, probes int) (*tally, *timeline) {
	ctx := context.Background()
	t := new(tally)
	tl := new(timeline)
	send := func() { tl.call(t, func() (bool, error) { return lim.Allow(ctx, key) }) }
	start := time.Now()
	for range slowLimit.Burst {
		send()
	}
	for k := 1; k <= probes; k++ {
		time.Sleep(time.Until(start.Add(time.Duration(k)*slowProbeEvery + slowProbeLag)))
		send()
	}
	time.Sleep(time.Until(start.Add(slowResume(probes) + slowProbeLag)))
	for range slowLimit.Burst {
		send()
	}
	return t, tl
}

// slowResume is when case 3b asks for a burst again, after its probes.
func slowResume(probes int) time.Duration {
	return time.Duration(probes) * slowProbeEvery * 3 / 2
}
