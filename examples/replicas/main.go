// Command replicas measures three ways of holding one rate limit across the
// replicas of a service, in one process, with real HTTP servers on loopback
// and a real (embedded) Redis:
//
//   - per-replica memory buckets: each replica runs its own in-process
//     limiter at the full limit, the classic mistake;
//   - a Redis fixed-window counter: INCR and EXPIRE on a key per second;
//   - sluice: core.New on the shared Redis, behind httplimit, its
//     limiters one fleet (core.WithFleet).
//
// Each approach gets the same traffic for one tenant: a steady load at three
// times the limit, then bursts that straddle a second boundary (the fixed
// window's worst case), spread over the replicas by an uneven load
// balancer.
//
// Then comes a scale-out and an outage, under the same load: each run
// starts the replicas as above, doubles them part way through (each new
// replica takes half of its twin's share of the traffic: 60/25/15 becomes
// 30/12.5/7.5/30/12.5/7.5), and once the limiters count the new replicas,
// cuts Redis off for a few seconds. It runs three times: the fixed window;
// sluice with core.WithFleet, whose replicas count each other through Redis
// and fall back to 1/n of the limit for the n they last counted; and sluice
// with core.WithFallbackReplicas set to the replica count before the
// scale-out, as a deployment configured for it would be. Every number it
// prints is measured in the run; nothing is computed from a model.
//
// It uses an embedded miniredis unless REDIS_ADDR names a real Redis, and
// reaches Redis through a TCP fault proxy (redistest.ListenProxy), which is
// how it can take Redis away and bring it back without stopping it. It
// sends traffic to loopback only, for a fixed time, and stops by itself.
//
//	go run ./examples/replicas [-duration 6s] [-rate 300] [-limit 100] [-replicas 3] [-weights 60,25,15] [-chart out.svg]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoredis"
	"github.com/sluicehq/sluice/redistest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		log.Fatal(err)
	}
}

// config is the demo's settings, from its flags.
type config struct {
	limit    int           // the global limit, requests per second
	rate     int           // offered load, requests per second
	steady   time.Duration // steady load per approach, whole seconds
	bursts   int           // bursts across a second boundary per approach
	outage   time.Duration // how long Redis is cut off after the scale-out, whole seconds
	weights  []int         // load balancer weights, one per replica
	chart    string        // SVG file to write, or ""
	progress io.Writer     // where progress goes (stderr)
	embedded bool          // Redis is an embedded miniredis
}

// replicas is the number of replicas.
func (c *config) replicas() int { return len(c.weights) }

// limitSpec is the limit sluice and the memory buckets enforce: limit per
// second with a burst of a tenth of a second's worth. The fixed window has
// no burst setting: it admits limit per calendar second.
func (c *config) limitSpec() core.Limit {
	return core.PerSecond(c.limit).WithBurst(max(1, c.limit/10))
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("replicas", flag.ContinueOnError)
	fs.SetOutput(stderr)
	limit := fs.Int("limit", 100, "the tenant's global limit, in requests per second")
	rate := fs.Int("rate", 300, "offered load, in requests per second")
	steady := fs.Duration("duration", 6*time.Second, "steady load per approach, rounded up to whole seconds")
	bursts := fs.Int("bursts", 2, "bursts across a second boundary per approach, 2 seconds each")
	outage := fs.Duration("outage", 4*time.Second, "how long Redis is cut off after the scale-out, rounded up to whole seconds (0 skips the scale-out and outage)")
	replicas := fs.Int("replicas", 3, "number of replicas (without -weights, replica i gets a share of 1/(i+1))")
	weights := fs.String("weights", "60,25,15", "load balancer `weights`, one per replica")
	chart := fs.String("chart", "", "write the admitted rate over time as an SVG line chart to `file`")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg := &config{limit: *limit, rate: *rate, steady: wholeSeconds(*steady), bursts: *bursts,
		outage: wholeSeconds(*outage), chart: *chart, progress: stderr}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case set["weights"] || !set["replicas"] || *replicas == 3:
		for _, s := range strings.Split(*weights, ",") {
			w, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || w < 1 {
				return nil, fmt.Errorf("-weights: %q is not a positive integer", s)
			}
			cfg.weights = append(cfg.weights, w)
		}
		if set["replicas"] && *replicas != len(cfg.weights) {
			return nil, fmt.Errorf("-replicas %d but -weights has %d entries", *replicas, len(cfg.weights))
		}
	case *replicas < 1 || *replicas > 64:
		return nil, errors.New("-replicas must be between 1 and 64")
	default:
		for i := range *replicas {
			cfg.weights = append(cfg.weights, int(math.Round(1000/float64(i+1))))
		}
	}
	switch {
	case cfg.limit < 1 || cfg.rate < 1:
		return nil, errors.New("-limit and -rate must be positive")
	case cfg.rate > 5000:
		return nil, errors.New("-rate above 5000 requests/s would measure this machine, not the limiters")
	case cfg.steady < time.Second || cfg.steady > 10*time.Minute:
		return nil, errors.New("-duration must be between 1s and 10m")
	case cfg.bursts < 0 || cfg.bursts > 100:
		return nil, errors.New("-bursts must be between 0 and 100")
	case cfg.outage < 0 || cfg.outage > 10*time.Minute:
		return nil, errors.New("-outage must be between 0 and 10m")
	}
	return cfg, nil
}

// wholeSeconds rounds d up to whole seconds.
func wholeSeconds(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	srv, err := demoredis.Start(stdout)
	if err != nil {
		return err
	}
	defer srv.Close()
	cfg.embedded = srv.Embedded()
	px, err := redistest.ListenProxy(srv.Addr)
	if err != nil {
		return err
	}
	defer px.Close()
	con := newConsole(cfg.progress)
	defer con.clear()
	transport := &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 10 * time.Second}
	defer transport.CloseIdleConnections()
	d := &demo{
		cfg:    cfg,
		proxy:  px,
		runID:  strconv.FormatInt(time.Now().UnixNano(), 36),
		con:    con,
		client: &http.Client{Transport: transport, Timeout: 5 * time.Second},
		logger: slog.New(slog.NewTextHandler(con, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	printSetup(stdout, cfg)

	var main []*phase
	for _, a := range d.approaches() {
		p, err := d.runMain(ctx, a)
		if err != nil {
			return err
		}
		main = append(main, p)
	}
	var out *outagePhase
	if cfg.outage > 0 {
		if out, err = d.runOutage(ctx); err != nil {
			return err
		}
	}
	con.clear()
	if onOutage != nil && out != nil {
		onOutage(cfg, out)
	}
	printResults(stdout, cfg, main, out)
	if cfg.chart != "" {
		if err := writeChart(cfg.chart, cfg, main, out); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nwrote %s\n", cfg.chart)
	}
	return nil
}

// onOutage, when set (by a test), receives the outage phase's records
// before they are printed.
var onOutage func(*config, *outagePhase)
