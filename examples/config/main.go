// Command config builds rate-limited routes from a JSON file: what a
// service copies to take its limits from configuration.
//
//	go run ./examples/config                        # the sample, limits.json
//	go run ./examples/config -config my.json        # your file
//	go run ./examples/config -config my.json -check # check it, build it, exit
//
// It builds every route's middleware, sends each route a few requests
// (stopping at the first 429) and prints the statuses. Without a Redis
// address in the file it uses REDIS_ADDR, or else an embedded miniredis; the
// statuses shown are those of a fresh Redis.
//
// The file (see limits.json, Config and Route) names the Redis address, the
// failure policy, the trusted proxies, a default limit and the routes. A
// limit is text, as core.ParseLimit reads it ("600/m", "100/s burst 20",
// "5/15m name login"), or an object with rate, period, burst and name. A
// route's key is what its limit counts per: ip (the default), tenant (the
// X-Tenant-ID header), user (X-User-ID) or global.
//
// Every route has buckets of its own, named by its pattern, even when two
// routes have the same limit and key (the middlewares, made in one loop,
// count per route: httplimit.WithPerRoute). Routes that give the same scope (and have the same
// limit) share their buckets, by choice, through httplimit.WithScope: the
// two items routes of the sample spend one budget.
//
// Unknown fields, bad limits and unknown keys are errors that name the
// route:
//
//	limits.json: route "POST /login": core: invalid limit: limit "5/fortnight": period "fortnight" is not a unit (s, m, h, d, ...) or a positive duration (15m, 1.5s, 2d)
//	limits.json: route "GET /search": key "email": want one of global, ip, tenant, user
package main

import (
	"cmp"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoredis"
)

//go:embed limits.json
var sample []byte

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run is the program, with its arguments and output passed in for tests.
func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	path := fs.String("config", "", "read the configuration from `file` (default: the sample, limits.json)")
	check := fs.Bool("check", false, "check the file and build its routes, then exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: name the file with -config", fs.Arg(0))
	}
	name, data := "limits.json", sample
	if *path != "" {
		name = *path
		var err error
		if data, err = os.ReadFile(name); err != nil {
			return err
		}
	}
	cfg, err := load(data)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	opts, err := cfg.limiterOptions()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}

	addr := cfg.Redis
	if addr == "" && !*check {
		srv, err := demoredis.Start(stdout) // REDIS_ADDR, or an embedded miniredis
		if err != nil {
			return err
		}
		defer srv.Close()
		addr = srv.Addr
	}
	// Your go-redis client and one engine for every route. The two options
	// let the limiter's time budget reach the socket and keep a lost reply
	// from charging its bucket twice. Neither does any I/O yet, so -check
	// builds everything without a Redis.
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	lim, err := core.New(rdb, opts...)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	h, err := cfg.Handler(lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok") // your handlers here
	}))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if *check {
		fmt.Fprintf(stdout, "%s: ok, %d routes\n", name, len(cfg.Routes))
		return nil
	}
	probe(stdout, cfg, h) // in a service: http.ListenAndServe(":8080", h)
	return nil
}

// wildcard matches a ServeMux wildcard such as {id} or {path...}.
var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// probe sends each route up to five requests, as tenant acme and user 42,
// stopping at the first that is not 200, and prints the statuses.
func probe(w io.Writer, cfg *Config, h http.Handler) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tLIMIT\tKEY\tSCOPE\tSTATUSES")
	for _, rt := range cfg.Routes {
		method, path, ok := strings.Cut(rt.Pattern, " ")
		if !ok {
			method, path = http.MethodGet, rt.Pattern
		}
		// The path after any host (Handler checked there is a '/'), with
		// a 1 for each wildcard.
		path = strings.ReplaceAll(path[strings.Index(path, "/"):], "{$}", "")
		path = wildcard.ReplaceAllString(path, "1")
		var statuses []string
		for range 5 {
			req := httptest.NewRequest(method, path, nil)
			req.Header.Set("X-Tenant-ID", "acme")
			req.Header.Set("X-User-ID", "42")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			statuses = append(statuses, fmt.Sprint(rec.Code))
			if rec.Code != http.StatusOK {
				break
			}
		}
		limit, _ := cmp.Or(rt.Limit, cfg.Default).MarshalText()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", rt.Pattern, limit, cmp.Or(rt.Key, "ip"),
			cmp.Or(rt.Scope, rt.Pattern), strings.Join(statuses, " "))
	}
	tw.Flush()
}
