// Command compare measures sluice against other Go rate limiters on one
// Redis: throughput and latency, Redis's cost per decision, and accuracy
// against an ideal token bucket. It prints markdown tables on stdout and its
// progress on stderr.
//
// Run it from the bench directory:
//
//	go run ./cmd/compare          # the full run, about 11 minutes
//	go run ./cmd/compare -quick   # a CI-sized run, about a minute and a half
//	go run ./cmd/compare -fleet   # only the fleet section, about 6 minutes
//
// It starts its own redis-server (from PATH) on a free loopback port unless
// -addr names one, and on a machine with two CPUs or more it pins Redis to
// the first and itself to the others. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bench"
)

// The scenarios' limits.
var (
	// highLimit is never reached in a cell (the burst alone outlasts it), so
	// throughput measures the store. Its rate is low enough that every
	// library still records each request: redis_rate keeps its state in
	// floating-point seconds since 2017, whose resolution (about 60 ns now)
	// swallows a 1 ns increment, so at 10⁹/s it never wrote at all.
	highLimit = bench.Limit{Rate: 1_000_000, Period: time.Second, Burst: 1_000_000_000}
	// denyLimit is a realistic limit that a hammered hot key exceeds, so
	// nearly every request is denied.
	denyLimit = bench.Limit{Rate: 100, Period: time.Second, Burst: 100}
	// hammerLimit is accuracy case (a).
	hammerLimit = bench.Limit{Rate: 1000, Period: time.Second, Burst: 100}
	// slowLimit is accuracy case (b): one token every 6 s.
	slowLimit = bench.Limit{Rate: 10, Period: time.Minute, Burst: 10}
	// subLimit is accuracy case (c): half a token per request at 1 ms apart.
	subLimit = bench.Limit{Rate: 500, Period: time.Second, Burst: 500}
)

const (
	hotKeys       = 1
	manyKeys      = 10_000
	hammerCallers = 64
	// hammerSlot is the resolution at which the hammered case records when
	// calls returned, to find silences.
	hammerSlot = 100 * time.Microsecond
	// hammerWarmup is how long the hammered case's callers first run on
	// another key, so that the client has its connections before the
	// measured key's full bucket starts counting.
	hammerWarmup = 100 * time.Millisecond
	// hammerTries bounds the runs of the hammered case per limiter.
	hammerTries    = 3
	subInterval    = time.Millisecond
	subDuration    = 2 * time.Second
	slowProbeEvery = time.Second
	// slowProbeLag puts each slow-bucket probe a little after its second,
	// so that a token due on the second is never asked for early.
	slowProbeLag = 20 * time.Millisecond
)

type config struct {
	duration    time.Duration
	rounds      int
	warmup      time.Duration
	quick       bool
	callers     []int
	costCallers int
	only        []string
	addr        string
	pin         bool
	sections    map[string]bool
	hammerFor   time.Duration
	slowProbes  int
	cpuprofile  string

	fleetDuration time.Duration
	fleetRounds   int
	fleetShapes   []shape
	fleetProcs    int
	fleetSettle   float64 // wait before each round until the 1-minute load average is at most this; 0: do not wait
}

var allSections = []string{"throughput", "deny", "accuracy", "fleet"}

func parseFlags() (config, error) {
	var (
		c        config
		callers  string
		only     string
		sections string
		shapes   string
		fleet    bool
	)
	flag.DurationVar(&c.duration, "duration", 2*time.Second, "measured time of each throughput cell (one limiter, one scenario, one number of callers)")
	flag.IntVar(&c.rounds, "rounds", 2, "passes over the throughput and deny cells; each cell's -duration is split evenly over them, so that noise on the machine spreads over the run")
	flag.BoolVar(&c.quick, "quick", false, "CI-sized run (about 1.5 min): 100ms cells in one round, shorter accuracy cases, 300ms fleet cells in one round; an explicit -duration, -rounds, -fleet-duration or -fleet-rounds still wins")
	flag.StringVar(&callers, "callers", "1,16,64,256", "comma-separated numbers of concurrent callers")
	flag.IntVar(&c.costCallers, "cost-callers", 64, "number of callers whose cells give the Redis cost tables (the largest of -callers if absent)")
	flag.StringVar(&only, "only", "", "comma-separated limiters to measure (default all): "+strings.Join(peerNames(), ", "))
	flag.StringVar(&c.addr, "addr", "", "use this Redis (host:port) instead of starting one; it is never flushed, and its INFO counts other clients too")
	flag.BoolVar(&c.pin, "pin", true, "pin redis-server to the first CPU and this process to the others, with taskset (Linux, 2+ CPUs)")
	flag.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of the measuring process to this file, and one of each worker process to this file with \".worker-<pid>\" added")
	flag.StringVar(&sections, "sections", strings.Join(allSections, ","), "comma-separated sections to run: "+strings.Join(allSections, ", "))
	flag.BoolVar(&fleet, "fleet", false, "run only the fleet section (-sections fleet)")
	flag.DurationVar(&c.fleetDuration, "fleet-duration", time.Second, "measured time of each fleet cell in each round")
	flag.IntVar(&c.fleetRounds, "fleet-rounds", 5, "rounds over the fleet cells; each figure is the median over them, decisions/s with the slowest and fastest round, and sluice is paired with redis_rate and floor round by round")
	flag.StringVar(&shapes, "fleet-shapes", "64x1,32x2,8x8,1x64", "comma-separated fleet shapes, instances x callers per instance")
	scenarios := flag.String("fleet-scenarios", "10k,hot", "comma-separated fleet scenarios: 10k, hot (one hot key, 10⁶/s, Redis-bound), hotlimit (one hot key, 1000/s burst 1000, limit-bound), hotreal (one hot key, 10⁶/s burst 10⁶)")
	flag.IntVar(&c.fleetProcs, "fleet-procs", 4, "most worker processes of the fleet's multi-process layout (one per instance up to this)")
	flag.Float64Var(&c.fleetSettle, "fleet-settle", 0, "before each fleet round, wait (up to two minutes) until the 1-minute load average is at most this, so that every round starts on a settled machine; 0 does not wait")
	flag.Parse()
	if flag.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", flag.Args())
	}

	explicit := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	c.hammerFor, c.slowProbes = 3*time.Second, 30
	if c.quick {
		if !explicit["duration"] {
			c.duration = 100 * time.Millisecond
		}
		if !explicit["rounds"] {
			c.rounds = 1
		}
		c.hammerFor, c.slowProbes = 500*time.Millisecond, 8
		if !explicit["fleet-duration"] {
			c.fleetDuration = 300 * time.Millisecond
		}
		if !explicit["fleet-rounds"] {
			c.fleetRounds = 1
		}
	}
	if c.duration <= 0 || c.rounds < 1 {
		return c, fmt.Errorf("-duration and -rounds must be positive")
	}
	if c.fleetDuration <= 0 || c.fleetRounds < 1 || c.fleetProcs < 1 {
		return c, fmt.Errorf("-fleet-duration, -fleet-rounds and -fleet-procs must be positive")
	}
	if c.fleetSettle < 0 {
		return c, fmt.Errorf("-fleet-settle must be 0 (do not wait) or a positive load average, got %v", c.fleetSettle)
	}
	fleetScenarioNames = nil
	for _, f := range strings.Split(*scenarios, ",") {
		f = strings.TrimSpace(f)
		if !slices.ContainsFunc(allFleetScenarios(), func(s fleetScenario) bool { return s.name == f }) {
			return c, fmt.Errorf("-fleet-scenarios: no scenario %q (have 10k, hot, hotlimit, hotreal)", f)
		}
		fleetScenarioNames = append(fleetScenarioNames, f)
	}
	var err error
	if c.fleetShapes, err = parseShapes(shapes); err != nil {
		return c, fmt.Errorf("-fleet-shapes: %w", err)
	}
	c.warmup = min(max(c.duration/time.Duration(c.rounds)/8, 50*time.Millisecond), 250*time.Millisecond)

	for _, f := range strings.Split(callers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return c, fmt.Errorf("-callers: %q is not a positive number", f)
		}
		c.callers = append(c.callers, n)
	}
	slices.Sort(c.callers)
	c.callers = slices.Compact(c.callers)
	if !slices.Contains(c.callers, c.costCallers) {
		c.costCallers = c.callers[len(c.callers)-1]
	}

	if only != "" {
		names := peerNames()
		for _, f := range strings.Split(only, ",") {
			f = strings.TrimSpace(f)
			if !slices.Contains(names, f) {
				return c, fmt.Errorf("-only: no limiter %q (have %s)", f, strings.Join(names, ", "))
			}
			c.only = append(c.only, f)
		}
	}

	if fleet {
		if explicit["sections"] {
			return c, fmt.Errorf("-fleet and -sections: give one")
		}
		sections = "fleet"
	}
	c.sections = map[string]bool{}
	for _, f := range strings.Split(sections, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allSections, f) {
			return c, fmt.Errorf("-sections: no section %q (have %s)", f, strings.Join(allSections, ", "))
		}
		c.sections[f] = true
	}
	return c, nil
}

func peerNames() []string {
	var names []string
	for _, p := range bench.Peers() {
		names = append(names, p.Name)
	}
	return names
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == workerArg {
		os.Exit(workerMain(os.Args[2:]))
	}
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(2)
	}
	pinned := pin(cfg.pin) // may re-execute this program under taskset
	if cfg.cpuprofile != "" {
		f, err := os.Create(cfg.cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "compare: -cpuprofile:", err)
			os.Exit(2)
		}
		// Worker processes profile themselves too (see workerMain).
		_ = os.Setenv(workerProfileEnv, cfg.cpuprofile)
	}
	err = run(cfg, pinned)
	pprof.StopCPUProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func run(cfg config, pinned pinning) error {
	started := time.Now()
	h := &harness{cfg: cfg, pinned: pinned, runID: strconv.FormatInt(started.UnixNano()%1e9, 36)}
	for _, p := range bench.Peers() {
		if len(cfg.only) == 0 || slices.Contains(cfg.only, p.Name) {
			h.peers = append(h.peers, p)
		}
	}

	addr := cfg.addr
	if addr == "" {
		srv, err := bench.StartRedis(pinned.RedisCPUs)
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("%w (or pass -addr)", err)
		}
		if err != nil {
			return err
		}
		defer srv.Close()
		// Leave no redis-server behind on ^C. (go-zero also traps SIGINT
		// and SIGTERM, to exit 5.5 s later; this exits first.)
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		go func() {
			<-sig
			_ = srv.Close()
			fmt.Fprintln(os.Stderr, "compare: interrupted")
			os.Exit(130)
		}()
		addr = srv.Addr()
		h.own = true
		h.redisCmd = srv.Command()
	}
	maxCallers := slices.Max(append(slices.Clone(cfg.callers), hammerCallers))
	h.env = bench.Env{Addr: addr, PoolSize: maxCallers}
	h.admin = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2})
	defer h.admin.Close()
	ctx := context.Background()
	if err := h.admin.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", addr, err)
	}
	h.reset()

	fmt.Fprintf(os.Stderr, "compare: redis at %s; %s; about %s to go\n", addr, pinned.Note, h.plan().Round(time.Second))
	out := newReport(os.Stdout)
	h.header(out)

	h.measureRounds()
	if cfg.sections["throughput"] {
		h.throughputTables(out)
	}
	if cfg.sections["deny"] {
		if !cfg.sections["throughput"] {
			out.section("1. Throughput and latency")
		}
		h.denyTables(out)
	}
	if cfg.sections["throughput"] || cfg.sections["deny"] {
		h.costTables(out)
	}
	if cfg.sections["accuracy"] {
		h.accuracy(out)
	}
	if cfg.sections["fleet"] {
		h.fleetRounds()
		h.fleetTables(out)
	}
	h.notes(out)
	out.printf("Whole run: %s. Load average at the end: %s.\n", time.Since(started).Round(time.Second), loadAvg())
	fmt.Fprintf(os.Stderr, "compare: done in %s\n", time.Since(started).Round(time.Second))
	return out.err
}
