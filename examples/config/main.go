// Command config runs an HTTP service whose rate limits, keys and failure
// handling come from a configuration file, and checks such files.
//
//	go run ./examples/config                                    # the embedded sample, sluice.json
//	go run ./examples/config examples/config/sluice.json        # a file
//	go run ./examples/config -check examples/config/sluice.json # validate, build, exit
//	REDIS_ADDR=localhost:6379 go run ./examples/config          # a real Redis
//
// -addr and -metrics-addr override the file's listen and metrics_listen.
// Without REDIS_ADDR it starts an embedded miniredis. -check reads the file,
// validates it, builds every limiter and middleware (which needs no Redis)
// and exits: 0 if the file is good, 1 with one line per problem otherwise,
// each naming the line and the field:
//
//	config.json:12: routes[1].limit.burst: must be at least 1
//	config.json:30: tenants.acme.plan: unknown plan "gold" (plans: free, pro)
//
// When it serves, it prints a curl command for each route, then try:
//
//	for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code} ' -H 'X-API-Key: acme-demo-key' localhost:8080/search; done
//	curl -s localhost:9090/metrics | grep ^sluice_
//
// # The file
//
// The file is JSON. JSON has no comments, so any object key that begins with
// "//" is a comment: it may appear any number of times, holds any value and
// is ignored. Every other key must be one of those below; a misspelt key is
// an error, never silently ignored. Durations are Go duration strings ("250ms",
// "1m", "24h").
//
// A limit is an object:
//
//	{"name": "items", "rate": 10, "period": "1s", "burst": 20}
//
// rate (at least 1) events per period, with room for burst (at least 1,
// default rate) at once; see core.Limit. name is optional: it labels the limit
// in metrics and headers, and is part of the bucket's identity.
//
// Top-level fields, all optional except routes:
//
//   - listen: the API's address. Default "127.0.0.1:8080".
//   - metrics_listen: the address of the Prometheus endpoint (/metrics); ""
//     or absent for none.
//   - redis: prefix (the Redis key prefix, default "sluice:"), timeout (the
//     budget of one Redis call, default "50ms"), pool_size (the go-redis
//     pool, default go-redis's own) and batching (Redis round trips in
//     flight before decisions are coalesced, default 4; 0 turns batching
//     off). The address is not here: it comes from REDIS_ADDR.
//   - failure: policy ("fallback_local", the default, "fail_open" or
//     "fail_closed") and fallback_replicas (the number of replicas that
//     share the traffic; each enforces 1/n of every limit while Redis is
//     down; default 1). See docs/production.md for how to choose.
//   - headers: the rate-limit response fields, "legacy" (default), "ietf",
//     "both" or "none"; and problem_json (true for RFC 9457 error bodies).
//   - trusted_proxies: CIDR prefixes or addresses of the proxies allowed to
//     name the client in X-Forwarded-For; without them the client is the
//     connection's peer. trusted_header reads a single-address header such as
//     X-Real-IP instead, from those proxies only.
//   - before_auth: a per-IP limit on every request, checked before
//     authentication: limit, and optionally penalty (a lock after a denial)
//     and skip_paths (exempt paths, such as "/healthz").
//   - plans: named limits, one per plan, each applying per tenant.
//   - tenants: by name, each with its plan and api_keys. A request names its
//     tenant with "Authorization: Bearer <key>" or "X-API-Key: <key>".
//   - routes: the endpoints, in a list.
//
// Each route has:
//
//   - pattern: an http.ServeMux pattern, such as "GET /items/{id}".
//   - auth: true to require an API key. Authentication runs before the
//     route's limiter, so the limiter can key by tenant.
//   - limit, or plan: true to use the authenticated tenant's plan. A route
//     with neither is not limited (beyond before_auth).
//   - key: the dimensions the limit applies per, joined in order: "ip",
//     "tenant" (needs auth), "route" (the matched pattern) and "global" (one
//     bucket for everyone).
//   - extra_limits: more limits checked together with the main one on the
//     same key, such as a daily cap.
//   - cost: tokens per request (default 1); at most every limit's burst,
//     and under fallback_local at most each replica's share of it
//     (ceil(burst/fallback_replicas)), or the local fallback would deny
//     every such request while Redis is down.
//   - penalty: lock a key out for this long after a denial, on every
//     replica. Routes with different penalties run on separate engines over
//     the same Redis client.
//   - wait: let a request that would be denied wait up to this long for its
//     tokens instead.
//   - dry_run: decide, count and set headers, but never deny: for trying a
//     new limit on live traffic.
//
// Two routes share buckets when their keys and limits are the same, names
// included: in the sample, GET /search spends the tenant's plan, while POST
// /reports (plan plus a daily cap) has buckets of its own.
//
// JSON rather than YAML: the standard library reads it, so the example adds no
// dependency, and its Token API gives the byte offsets from which the errors'
// line numbers are computed.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/examples/internal/demoredis"
)

//go:embed sluice.json
var sample []byte

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(1)
	}
}

// run is the program, with its arguments and outputs passed in for tests.
// It serves until ctx ends or the process receives SIGINT or SIGTERM.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.Bool("check", false, "validate the file, build the middleware, and exit")
	addr := fs.String("addr", "", "listen on `address` instead of the file's listen")
	metricsAddr := fs.String("metrics-addr", "", "serve /metrics on `address` instead of the file's metrics_listen")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: config [-check] [-addr host:port] [-metrics-addr host:port] [file.json]")
		fmt.Fprintln(stderr, "Without a file, the embedded sample (sluice.json) is used.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	name, data := "sluice.json", sample
	switch fs.NArg() {
	case 0:
	case 1:
		name = fs.Arg(0)
		var err error
		if data, err = os.ReadFile(name); err != nil {
			return err
		}
	default:
		fs.Usage()
		return errors.New("config: at most one file")
	}
	cfg, err := Parse(name, data)
	if err != nil {
		return err
	}
	if *addr != "" {
		cfg.Listen = *addr
	}
	if *metricsAddr != "" {
		cfg.MetricsListen = *metricsAddr
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	if *check {
		// core.New does no I/O, so the whole service can be built against
		// a client that is never used.
		rdb := newClient("127.0.0.1:6379", cfg.Redis, false)
		defer rdb.Close()
		if _, err := build(cfg, rdb, logger); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintf(stdout, "%s: ok: %d routes, %d plans, %d tenants, failure policy %s with %d fallback replicas\n",
			name, len(cfg.Routes), len(cfg.Plans), len(cfg.Tenants), cfg.Policy, cfg.FallbackReplicas)
		return nil
	}

	srv, err := demoredis.Start(stdout)
	if err != nil {
		return err
	}
	defer srv.Close()
	rdb := newClient(srv.Addr, cfg.Redis, true)
	defer rdb.Close()
	a, err := build(cfg, rdb, logger)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	servers := []*http.Server{{Addr: cfg.Listen, Handler: a.handler, ReadHeaderTimeout: 5 * time.Second}}
	if cfg.MetricsListen != "" {
		servers = append(servers, &http.Server{Addr: cfg.MetricsListen, Handler: a.metrics, ReadHeaderTimeout: 5 * time.Second})
	}
	listeners := make([]net.Listener, 0, len(servers))
	for _, s := range servers {
		ln, err := net.Listen("tcp", s.Addr)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return err
		}
		listeners = append(listeners, ln)
	}
	errc := make(chan error, len(servers))
	for i, s := range servers {
		go func() { errc <- s.Serve(listeners[i]) }()
	}
	base := "http://" + listeners[0].Addr().String()
	fmt.Fprintf(stdout, "listening on %s\n", base)
	if len(listeners) > 1 {
		fmt.Fprintf(stdout, "metrics on http://%s/metrics\n", listeners[1].Addr())
	}
	fmt.Fprintln(stdout, "Try (the statuses are those of a fresh Redis):")
	for _, line := range tryLines(cfg, base) {
		fmt.Fprintf(stdout, "  %s\n", line)
	}

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(shutdownCtx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// wildcard matches a ServeMux wildcard segment.
var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// tryLines returns a curl command for each route of cfg that a plain URL
// can reach, with the status a fresh Redis gives it: 200, and 401 for the
// first route that needs an API key, asked without one.
func tryLines(cfg *Config, base string) []string {
	apiKey := ""
	if len(cfg.Tenants) > 0 && len(cfg.Tenants[0].APIKeys) > 0 {
		apiKey = cfg.Tenants[0].APIKeys[0]
	}
	var lines []string
	shown401 := false
	var loop string
	for _, rt := range cfg.Routes {
		method, path, ok := strings.Cut(rt.Pattern, " ")
		if !ok {
			method, path = "GET", rt.Pattern
		}
		if !strings.HasPrefix(path, "/") || (rt.Auth && apiKey == "") {
			continue // a host pattern, or no key to show
		}
		switch method {
		case "GET", "POST", "PUT", "PATCH", "DELETE":
		default:
			continue
		}
		url := base + wildcard.ReplaceAllStringFunc(path, func(w string) string {
			if w == "{$}" {
				return ""
			}
			return "1"
		})
		opts := ""
		if method != "GET" {
			opts = " -X " + method
		}
		if rt.Auth {
			if !shown401 {
				lines = append(lines, fmt.Sprintf("curl -i%s %s   # 401: no API key", opts, url))
				shown401 = true
			}
			opts += " -H 'X-API-Key: " + apiKey + "'"
		}
		lines = append(lines, fmt.Sprintf("curl -i%s %s   # 200", opts, url))
		if loop == "" && rt.Limit != nil && !rt.DryRun && rt.Wait == 0 && rt.Cost == 1 && len(rt.ExtraLimits) == 0 {
			note := "429 once the burst is spent"
			if rt.Penalty > 0 {
				note += ", then a " + rt.Penalty.String() + " lock"
			}
			loop = fmt.Sprintf("for i in $(seq %d); do curl -s -o /dev/null -w '%%{http_code} '%s %s; done; echo   # %s",
				rt.Limit.Burst+1, opts, url, note)
		}
	}
	if loop != "" {
		lines = append(lines, loop)
	}
	return lines
}
