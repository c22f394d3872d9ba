// Command chi serves a small API on chi (github.com/go-chi/chi/v5) with
// sluice's net/http middleware: 100 requests a minute per client address
// and 600 per tenant on every route, 2 searches a minute per client, and
// 2 requests a minute per client on each route of a group, keyed by the
// route's pattern. It uses an embedded miniredis unless REDIS_ADDR is set.
//
// Route keys need the pattern chi matched, which chi (v5.3.0 and later)
// sets on the request only once it has routed: after the middlewares of
// r.Use have run. This example shows where route-keyed limits work.
//
//	go run ./examples/chi [-addr :8080]
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoserve"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// try is the curl lines to try; %[1]s is the base URL.
const try = `listening on %[1]s; try:
  curl -i -H 'X-Tenant-ID: acme' %[1]s/hello                # 200
  curl -i %[1]s/hello                                       # 400: no tenant
  curl -i -H 'X-Tenant-ID: acme' '%[1]s/search?q=go'        # 200
  curl -i -H 'X-Tenant-ID: acme' '%[1]s/search?q=go'        # 200
  curl -i -H 'X-Tenant-ID: acme' '%[1]s/search?q=go'        # 429: 2 searches a minute
  curl -i -H 'X-Tenant-ID: acme' %[1]s/items/1              # 200
  curl -i -H 'X-Tenant-ID: acme' %[1]s/items/2              # 200
  curl -i -H 'X-Tenant-ID: acme' %[1]s/items/3              # 429: 2 a minute on GET /items/{id}, whatever the id
  curl -i -X POST -H 'X-Tenant-ID: acme' %[1]s/items        # 201: POST /items has a bucket of its own
`

func run(ctx context.Context, args []string, stdout io.Writer) error {
	return demoserve.Run(ctx, "chi", args, stdout, try, func(redisAddr string) (demoserve.Server, io.Closer, error) {
		// Your go-redis client, and one engine for every middleware.
		// core.New takes any client; these two options let the limiter's
		// 50 ms budget reach the socket (and batch concurrent decisions)
		// and keep a lost reply from charging its bucket twice.
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
		lim, err := core.New(rdb)
		if err != nil {
			return nil, rdb, err
		}
		// Ready, as a readiness probe calls it: the scripts are loaded and
		// connections open before the first request spends its budget.
		if err := lim.Ready(ctx); err != nil {
			return nil, rdb, err
		}
		r := chi.NewRouter()
		// Every request, one budget across the routes (a middleware's default): 100 a minute per client address, then 600 a minute
		// per tenant. Keys that need no route work in r.Use. Clients write
		// X-Tenant-ID themselves: trust it only behind a gateway that sets
		// it, or key by keyfunc.TenantValue (examples/tenants).
		r.Use(httplimit.New(lim, core.PerMinute(100), keyfunc.IP()))
		r.Use(httplimit.New(lim, core.PerMinute(600), keyfunc.Tenant("X-Tenant-ID")))
		r.Get("/hello", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello, %s\n", r.Header.Get("X-Tenant-ID"))
		})

		// Route keys do not work in the r.Use above: it runs before chi
		// routes, when the pattern is not known yet, and every request
		// would be answered 400. Put them where chi has routed:
		//
		// on one route, with r.With: searches are expensive, 2 a minute
		// per client;
		perSearch := httplimit.New(lim, core.PerMinute(2), keyfunc.Join(keyfunc.IP(), keyfunc.Route()))
		r.With(perSearch).Get("/search", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "results for %q\n", r.URL.Query().Get("q"))
		})
		// or on a group, with r.Use inside r.Group, whose middlewares run
		// on each route after routing: 2 a minute per client on each
		// route of the group, keyed by its pattern, so /items/1 and
		// /items/2 share the bucket of GET /items/{id}.
		//
		// Not with r.Use inside r.Route or r.Mount: it runs when only the
		// mount is matched, and sees the mount's pattern ("/api/*"), one
		// bucket for the whole subtree. Use r.Group or r.With inside it.
		r.Group(func(r chi.Router) {
			r.Use(httplimit.New(lim, core.PerMinute(2), keyfunc.Join(keyfunc.IP(), keyfunc.Route())))
			r.Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "item %s\n", chi.URLParam(r, "id"))
			})
			r.Post("/items", func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintln(w, "created")
			})
		})
		return demoserve.HTTP(r), rdb, nil
	})
}
