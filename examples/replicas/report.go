package main

import (
	"fmt"
	"io"
	"slices"
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
	total := 0
	for _, wt := range cfg.weights {
		total += wt
	}
	var shares []string
	for _, wt := range cfg.weights {
		shares = append(shares, fmt.Sprintf("%.0f%%", 100*float64(wt)/float64(total)))
	}
	fmt.Fprintf(w, "%d replicas, each an HTTP server on loopback, behind a load balancer that sends them\n"+
		"%s of the requests. One tenant, limited to %d requests/s across the service\n"+
		"(sluice and the memory buckets: burst %d; the fixed window: %d per calendar second).\n"+
		"Each approach gets %d requests/s (%.1f× the limit) for %v, ",
		cfg.replicas(), strings.Join(shares, " / "), cfg.limit, cfg.limitSpec().Burst, cfg.limit,
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
		for _, r := range []*outageRun{out.fixed, out.sluice} {
			outRate[r.name] = float64(countIn(r.admittedTimes(), r.cut, r.restored)) / (r.restored - r.cut).Seconds()
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
			outage = fmt.Sprintf("local fallback: %.0f/s (%s), %d errors", outRate[p.name], ratio(outRate[p.name]), out.sluice.load.failed.Load())
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
		phases = append(phases, out.fixed.phase, out.sluice.phase)
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

func printOutage(w io.Writer, cfg *config, out *outagePhase) {
	fx, sl := out.fixed, out.sluice
	fmt.Fprintf(w, "\nRedis outage: the fixed window, then sluice, each under %d requests/s; Redis is cut off (connections\n"+
		"reset, new ones refused) from %.1f s to %.1f s of each run.\n\n", cfg.rate, sl.cut.Seconds(), sl.restored.Seconds())
	fixed, admitted, local := fx.admittedTimes(), sl.admittedTimes(), sl.degradedTimes()
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "| second\t| Redis\t| fixed window admitted\t| sluice admitted\t| sluice decided locally\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|")
	for t := time.Duration(0); t < sl.length; t += time.Second {
		state := "up"
		switch down := min(t+time.Second, sl.restored) - max(t, sl.cut); {
		case down < 100*time.Millisecond:
		case down > 900*time.Millisecond:
			state = "down"
		default:
			state = "partly"
		}
		fmt.Fprintf(tw, "| %d–%d\t| %s\t| %d\t| %d\t| %d\t|\n", int(t.Seconds()), int(t.Seconds())+1, state,
			countIn(fixed, t, t+time.Second), countIn(admitted, t, t+time.Second), countIn(local, t, t+time.Second))
	}
	tw.Flush()

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
		back = fmt.Sprintf("%d of %d replicas went back to Redis %v to %v after it returned", len(ts), cfg.replicas(),
			slices.Min(ts).Round(time.Millisecond), slices.Max(ts).Round(time.Millisecond))
	}
	fmt.Fprintf(w, "\nsluice: %d errors (answers other than 200 and 429) in %d requests;\n%s.\n",
		sl.load.failed.Load(), sl.load.sent.Load(), back)
	if n := countIn(local, 0, sl.cut); n > 0 {
		fmt.Fprintf(w, "Before the cut, %d decisions were made locally: Redis answered later than the 50 ms budget.\n", n)
	}
	if n := countIn(local, sl.restored, sl.length); n > 0 {
		fmt.Fprintf(w, "After Redis returned, %d decisions were made locally while the replicas found it again.\n", n)
	}
	if n := countIn(admitted, sl.restored, sl.restored+time.Second); float64(n) > 1.1*float64(cfg.limit) {
		fmt.Fprintf(w, "In the second after Redis returned sluice admitted %d (%.2f× the limit): the replicas back on Redis\n"+
			"shared the global bucket while the others still spent their local share.\n", n, float64(n)/float64(cfg.limit))
	}
	fmt.Fprintf(w, "Each replica's fallback allows 1/%d of the limit (core.WithFallbackReplicas(%d)), so the busiest replica\n"+
		"denies early and the quietest admits all it gets: together they stay near the limit, not at %d times it.\n",
		cfg.replicas(), cfg.replicas(), cfg.replicas())
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
