package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/core"
)

// summary is what the table shows for one approach.
type summary struct {
	steadyRate    float64       // admitted per second during the steady load
	worst         int           // most admitted in any 1-second window
	worstCalendar int           // most admitted in one calendar second
	worstBurst    int           // most admitted during one burst across a boundary
	p50, p99      time.Duration // time spent limiting a request
	decisions     int
}

func summarize(p *phase) summary {
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	var s summary
	var admitted []time.Duration
	var lats []time.Duration
	perSecond := map[time.Duration]int{}
	steady := 0
	for _, d := range p.rec.decisions {
		lats = append(lats, d.latency)
		if !d.allowed {
			continue
		}
		admitted = append(admitted, d.at)
		perSecond[d.at.Truncate(time.Second)]++
		if d.at < p.steadyEnd {
			steady++
		}
	}
	for _, b := range p.bursts {
		s.worstBurst = max(s.worstBurst, countIn(admitted, b-burstLen/2, b+burstLen/2))
	}
	s.decisions = len(lats)
	s.steadyRate = float64(steady) / p.steadyEnd.Seconds()
	s.worst = worstWindow(admitted, time.Second)
	for _, n := range perSecond {
		s.worstCalendar = max(s.worstCalendar, n)
	}
	slices.Sort(lats)
	s.p50, s.p99 = percentile(lats, 0.50), percentile(lats, 0.99)
	return s
}

// isSpike reports whether a burst across a second boundary got well over
// what the same time under the steady load got: whether the approach lets
// more through when traffic arrives at a boundary.
func isSpike(s summary) bool {
	return float64(s.worstBurst) > 1.3*s.steadyRate*burstLen.Seconds()
}

// worstWindow returns the largest number of times in any window of length w.
func worstWindow(times []time.Duration, w time.Duration) int {
	times = slices.Clone(times)
	slices.Sort(times)
	best, j := 0, 0
	for i, t := range times {
		for t-times[j] >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// countIn returns how many times fall in [from, to).
func countIn(times []time.Duration, from, to time.Duration) int {
	n := 0
	for _, t := range times {
		if t >= from && t < to {
			n++
		}
	}
	return n
}

func (p *phase) admittedTimes() []time.Duration {
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	var ts []time.Duration
	for _, d := range p.rec.decisions {
		if d.allowed {
			ts = append(ts, d.at)
		}
	}
	return ts
}

func (p *phase) degradedTimes() []time.Duration {
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	return slices.Clone(p.rec.degraded)
}

func printSetup(w io.Writer, cfg *config) {
	fmt.Fprintf(w, "%d replicas, each an HTTP server on loopback, behind a load balancer that sends them\n"+
		"%s of the requests. One tenant, limited to %d requests/s across the service\n"+
		"(sluice and the memory buckets: burst %d; the fixed window: %d per calendar second).\n"+
		"Each approach gets %d requests/s (%.1f× the limit) for %v, ",
		cfg.replicas(), shares(cfg.weights), cfg.limit, cfg.limitSpec().Burst, cfg.limit,
		cfg.rate, float64(cfg.rate)/float64(cfg.limit), cfg.steady)
	switch cfg.bursts {
	case 0:
		fmt.Fprint(w, "and no bursts (-bursts 0).\n\n")
	case 1:
		fmt.Fprint(w, "then a burst of 0.8 s at\nthat rate that straddles a second boundary.\n\n")
	default:
		fmt.Fprintf(w, "then %d bursts of 0.8 s at\nthat rate, each straddling a second boundary.\n\n", cfg.bursts)
	}
}

func printResults(w io.Writer, cfg *config, main []*phase, out *outagePhase) {
	limit := float64(cfg.limit)
	ratio := func(x float64) string { return fmt.Sprintf("%.2f×", x/limit) }
	outRate := map[string]float64{}
	if out != nil {
		for _, r := range out.runs() {
			outRate[r.name] = r.downRate()
		}
	}

	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "| approach\t| admitted, steady load\t| worst 1 s (sliding)\t| boundary spike\t| decision p50 / p99\t| during a Redis outage\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|")
	var sums []summary
	for _, p := range main {
		s := summarize(p)
		sums = append(sums, s)
		spike := "no"
		switch {
		case len(p.bursts) == 0:
			spike = "not measured (-bursts 0)"
		case isSpike(s):
			spike = fmt.Sprintf("yes, %+.0f%% over the limit", 100*(float64(s.worst)/limit-1))
		}
		var outage string
		switch {
		case p.name == "per-replica memory buckets":
			outage = fmt.Sprintf("no Redis to lose: %s, as always", ratio(s.steadyRate))
		case out == nil:
			outage = "not measured (-outage 0)"
		case p.name == "Redis fixed window":
			outage = fmt.Sprintf("fails open: %.0f/s (%s)", outRate[p.name], ratio(outRate[p.name]))
		default:
			outage = fmt.Sprintf("local fallback: %.0f/s (%s), %d errors", outRate[p.name], ratio(outRate[p.name]), out.fleet.load.failed.Load())
		}
		fmt.Fprintf(tw, "| %s\t| %.0f/s (%s)\t| %d (%s)\t| %s\t| %s / %s\t| %s\t|\n",
			p.name, s.steadyRate, ratio(s.steadyRate), s.worst, ratio(float64(s.worst)), spike,
			short(s.p50), short(s.p99), outage)
	}
	tw.Flush()

	fmt.Fprintln(w)
	for i, p := range main {
		if f := p.load.failed.Load(); f > 0 {
			fmt.Fprintf(w, "- %s: %d of %d requests failed (neither 200 nor 429).\n", p.name, f, p.load.sent.Load())
		}
		if p.name == "Redis fixed window" && len(p.bursts) > 0 && isSpike(sums[i]) {
			fmt.Fprintf(w, "- The fixed window admitted %d in one 0.8 s burst across a second boundary, its quota at the end\n"+
				"  of one window and again at the start of the next, against %.0f in 0.8 s of steady load. It never\n"+
				"  admitted more than %d in one calendar second, so a per-second graph shows nothing wrong.\n",
				sums[i].worstBurst, sums[i].steadyRate*burstLen.Seconds(), sums[i].worstCalendar)
		}
		if n := len(p.degradedTimes()); p.name == "Redis fixed window" && n > 0 {
			fmt.Fprintf(w, "- The fixed window let %d requests through unchecked: Redis failed or answered after 50 ms, and\n"+
				"  it fails open.\n", n)
		}
		if p.name == "sluice" {
			r := p.rec
			r.mu.Lock()
			lat := slices.Clone(r.storeLat)
			failed := len(r.storeErrs)
			r.mu.Unlock()
			slices.Sort(lat)
			cached := r.sources[core.SourceDenyCache].Load()
			fmt.Fprintf(w, "- sluice made %d decisions with %d Redis calls (p50 %s, p99 %s, %d failed or past the 50 ms budget);\n"+
				"  %d denials came from its local deny cache without a call. The Redis here is\n  %s.\n",
				sums[i].decisions, r.storeCalls.Load(), short(percentile(lat, 0.5)), short(percentile(lat, 0.99)), failed,
				cached, redisKind(cfg))
			if n := r.sources[core.SourceFallback].Load(); n > 0 {
				fmt.Fprintf(w, "  %d decisions were made locally, marked Degraded, because Redis failed or answered too late.\n", n)
			}
		}
	}
	phases := slices.Clone(main)
	if out != nil {
		for _, r := range out.runs() {
			phases = append(phases, r.phase)
		}
	}
	var lag time.Duration
	for _, p := range phases {
		lag = max(lag, time.Duration(p.load.maxLag.Load()))
	}
	if lag > 100*time.Millisecond {
		fmt.Fprintf(w, "- The load generator fell up to %v behind its schedule (the machine was busy); it sent the late\n"+
			"  requests as soon as it could, so some seconds above got fewer requests and later ones more.\n", lag.Round(time.Millisecond))
	}
	if out != nil {
		printOutage(w, cfg, out)
	}
}

// redisKind names the Redis in use, for the notes.
func redisKind(cfg *config) string {
	if cfg.embedded {
		return "an embedded miniredis, in this process, which starts a Lua interpreter for every\n  script call: a real Redis answers faster"
	}
	return "the one at REDIS_ADDR"
}

// runs returns the outage phase's runs, in the order they ran.
func (out *outagePhase) runs() []*outageRun { return []*outageRun{out.fixed, out.fleet, out.static} }

// downRate returns what r admitted per second while Redis was cut off.
func (r *outageRun) downRate() float64 {
	return float64(countIn(r.admittedTimes(), r.cut, r.restored)) / (r.restored - r.cut).Seconds()
}

func printOutage(w io.Writer, cfg *config, out *outagePhase) {
	fx, sl, st := out.fixed, out.fleet, out.static
	n0, n := cfg.replicas(), len(out.weights)
	fmt.Fprintf(w, "\nRedis outage after a scale-out. Each run starts with %d replicas behind %s; at %.1f s\n"+
		"%d more start, and the balancer sends the %d of them %s of the\n"+
		"requests (each new replica takes half of its twin's share). Then Redis is cut off (connections\n"+
		"reset, new ones refused) for %v, all under %d requests/s. Three runs, one after another: the fixed\n"+
		"window; sluice with core.WithFleet, which counts its replicas through Redis; and sluice with\n"+
		"core.WithFallbackReplicas(%d), the count it was deployed with.\n\n",
		n0, shares(cfg.weights), out.scaleAt.Seconds(), n-n0, n, shares(out.weights), cfg.outage, cfg.rate, n0)
	fixed, admitted, local, static := fx.admittedTimes(), sl.admittedTimes(), sl.degradedTimes(), st.admittedTimes()
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "| second\t| replicas\t| Redis\t| fixed window admitted\t| sluice admitted\t| sluice decided locally\t| WithFallbackReplicas(%d) admitted\t|\n", n0)
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|---\t|")
	for t := time.Duration(0); t < sl.length; t += time.Second {
		state := "up"
		switch down := min(t+time.Second, sl.restored) - max(t, sl.cut); {
		case down < 100*time.Millisecond:
		case down > 900*time.Millisecond:
			state = "down"
		default:
			state = "partly"
		}
		replicas := fmt.Sprintf("%d", n)
		switch {
		case t+time.Second <= out.scaleAt:
			replicas = fmt.Sprintf("%d", n0)
		case t < out.scaleAt:
			replicas = fmt.Sprintf("%d → %d", n0, n)
		}
		fmt.Fprintf(tw, "| %d–%d\t| %s\t| %s\t| %d\t| %d\t| %d\t| %d\t|\n", int(t.Seconds()), int(t.Seconds())+1, replicas, state,
			countIn(fixed, t, t+time.Second), countIn(admitted, t, t+time.Second), countIn(local, t, t+time.Second),
			countIn(static, t, t+time.Second))
	}
	tw.Flush()

	limit := float64(cfg.limit)
	fmt.Fprintf(w, "\nAdmitted while Redis was cut off (%.1f s to %.1f s of each run), against the limit of %d/s:\n",
		sl.cut.Seconds(), sl.restored.Seconds(), cfg.limit)
	if sl.counted > 0 {
		fmt.Fprintf(w, "- sluice (core.WithFleet): %.0f/s (%.2f×): its %d limiters all counted %d replicas %v after the scale-out,\n"+
			"  and each allowed 1/%d of the limit, with nobody telling it the count.\n",
			sl.downRate(), sl.downRate()/limit, n, n, (sl.counted - out.scaleAt).Round(10*time.Millisecond), n)
	} else {
		fmt.Fprintf(w, "- sluice (core.WithFleet): %.0f/s (%.2f×): at the cut its %d limiters counted %v replicas\n"+
			"  (not every heartbeat had reached Redis), and each allowed 1/n of the limit for the n it counted.\n",
			sl.downRate(), sl.downRate()/limit, n, sl.sizes)
	}
	fmt.Fprintf(w, "- sluice, WithFallbackReplicas(%d): %.0f/s (%.2f×): each of the %d replicas allowed 1/%d of the limit,\n"+
		"  sized for the %d it was deployed with", n0, st.downRate(), st.downRate()/limit, n, n0, n0)
	total := 0
	for _, wt := range out.weights {
		total += wt
	}
	quiet := map[float64]int{} // offered rate -> replicas offered less than their 1/n0
	for _, wt := range out.weights {
		if offered := float64(cfg.rate) * float64(wt) / float64(total); offered < limit/float64(n0) {
			quiet[offered]++
		}
	}
	if len(quiet) > 0 {
		var qs []string
		for _, rate := range slices.Sorted(maps.Keys(quiet)) {
			qs = append(qs, fmt.Sprintf("%d at %.1f/s", quiet[rate], rate))
		}
		fmt.Fprintf(w, " (the replicas offered less, %s, admit all they get)", strings.Join(qs, ", "))
	}
	fmt.Fprintf(w, ".%s\n", otherWindow(st, sl))
	fmt.Fprintf(w, "- Redis fixed window: %.0f/s (%.2f×): it fails open.%s\n", fx.downRate(), fx.downRate()/limit, otherWindow(fx, sl))

	// Each replica's first recovery after Redis returned.
	first := map[int]time.Duration{}
	sl.rec.mu.Lock()
	for _, r := range sl.rec.recovered {
		if t, seen := first[r.replica]; r.at >= sl.restored && (!seen || r.at-sl.restored < t) {
			first[r.replica] = r.at - sl.restored
		}
	}
	sl.rec.mu.Unlock()
	back := "no replica reported going back to Redis"
	if len(first) > 0 {
		var ts []time.Duration
		for _, t := range first {
			ts = append(ts, t)
		}
		back = fmt.Sprintf("%d of %d replicas went back to Redis %v to %v after it returned", len(ts), n,
			slices.Min(ts).Round(time.Millisecond), slices.Max(ts).Round(time.Millisecond))
	}
	fmt.Fprintf(w, "\nsluice (core.WithFleet): %d errors (answers other than 200 and 429) in %d requests;\n%s.\n",
		sl.load.failed.Load(), sl.load.sent.Load(), back)
	if n := countIn(local, 0, sl.cut); n > 0 {
		fmt.Fprintf(w, "Before the cut, %d decisions were made locally: Redis answered later than the 50 ms budget.\n", n)
	}
	if n := countIn(local, sl.restored, sl.length); n > 0 {
		fmt.Fprintf(w, "After Redis returned, %d decisions were made locally while the replicas found it again.\n", n)
	}
	if n := countIn(admitted, sl.restored, sl.restored+time.Second); float64(n) > 1.1*limit {
		fmt.Fprintf(w, "In the second after Redis returned sluice admitted %d (%.2f× the limit): the replicas back on Redis\n"+
			"shared the global bucket while the others still spent their local share.\n", n, float64(n)/limit)
	}
}

// otherWindow says when Redis was cut off in run r if that was not when
// it was in run ref, give or take 100 ms (the fleet's run waits for its
// count, the others do not); "" otherwise.
func otherWindow(r, ref *outageRun) string {
	if (r.cut-ref.cut).Abs() <= 100*time.Millisecond && (r.restored-ref.restored).Abs() <= 100*time.Millisecond {
		return ""
	}
	return fmt.Sprintf(" (Redis cut off from %.1f s to %.1f s in this run)", r.cut.Seconds(), r.restored.Seconds())
}

// shares formats weights as percentages of their sum: "60% / 25% / 15%".
func shares(weights []int) string {
	total := 0
	for _, wt := range weights {
		total += wt
	}
	var ss []string
	for _, wt := range weights {
		s := strconv.FormatFloat(100*float64(wt)/float64(total), 'f', 1, 64)
		ss = append(ss, strings.TrimSuffix(s, ".0")+"%")
	}
	return strings.Join(ss, " / ")
}

// short formats a latency compactly.
func short(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	default:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
}
