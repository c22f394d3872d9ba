// Command tenants shows per-tenant plans, a penalty lock and a dry run on
// net/http:
//
//   - An authentication middleware turns the X-API-Key header into a tenant
//     and its plan (free: 60 requests a minute, pro: 600), and the limit is
//     chosen per request from that plan. The tenant comes from the server's
//     own lookup, so a client cannot pick its bucket.
//
//   - POST /login allows 5 attempts a minute per client address, and going
//     over locks the address out for 15 minutes, on every replica.
//
//   - A stricter free plan (50 a minute) runs as a dry run: it blocks
//     nothing, and logs each request it would have denied.
//
// It uses an embedded miniredis unless REDIS_ADDR names a real Redis.
//
//	go run ./examples/tenants [-addr :8080]
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"github.com/redis/go-redis/v9"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoredis"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// tenant is what authentication learned about the caller. Its String is the
// tenant's name, which keyfunc.TenantValue uses as the key.
type tenant struct{ name, plan string }

func (t tenant) String() string { return t.name }

// tenantKey is the context key authenticate stores the tenant under.
var tenantKey = &struct{ name string }{"tenant"}

// apiKeys stands in for a real credential store.
var apiKeys = map[string]tenant{
	"acme-free-key":  {"acme", "free"},
	"globex-pro-key": {"globex", "pro"},
}

// plans are the limits tenants pay for. Named limits label the
// RateLimit-Policy header, and a tenant that changes plan starts a new bucket.
var plans = map[string]core.Limit{
	"free": core.PerMinute(60).WithName("free"),
	"pro":  core.PerMinute(600).WithName("pro"),
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tenants", flag.ExitOnError)
	addr := fs.String("addr", cmp.Or(os.Getenv("ADDR"), ":8080"), "listen `address` (the default comes from $ADDR when set)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	redisSrv, err := demoredis.Start(stdout)
	if err != nil {
		return err
	}
	defer redisSrv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	logger := slog.New(slog.NewTextHandler(stdout, nil))

	// One engine per Redis client; the login route's middleware adds a
	// penalty lock of its own.
	lim, err := core.New(rdb, core.WithLogger(logger))
	if err != nil {
		return err
	}
	// Ready, as a readiness probe calls it: the scripts are loaded and
	// connections open before the first request spends its budget.
	if err := lim.Ready(ctx); err != nil {
		return err
	}

	api := http.NewServeMux()
	api.HandleFunc("GET /reports", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "reports for %s\n", r.Context().Value(tenantKey))
	})
	byTenant := keyfunc.TenantValue(tenantKey)
	perPlan := httplimit.New(lim, plans["free"], byTenant,
		httplimit.WithLimitFunc(func(r *http.Request) (core.Limit, error) {
			t, _ := r.Context().Value(tenantKey).(tenant)
			if l, ok := plans[t.plan]; ok {
				return l, nil
			}
			return core.Limit{}, fmt.Errorf("tenant %q has no plan %q", t.name, t.plan)
		}),
		httplimit.WithScope("api"), // a plan is a budget across the API, not per route
		httplimit.WithHeaders(policy.HeadersBoth))
	// On trial: 50 a minute for free tenants. A dry run decides and
	// charges its own buckets but lets every request through and writes no
	// rate-limit field; its handler logs each request it would have denied.
	var wouldDeny atomic.Int64
	freeTrial := httplimit.New(lim, core.PerMinute(50).WithName("free-50"), byTenant,
		httplimit.WithScope("api"),
		httplimit.WithDryRun(true),
		httplimit.WithDryRunHandler(func(r *http.Request, rep policy.DryRunReport) {
			if !rep.Result.Allowed || rep.Err != nil {
				t, _ := r.Context().Value(tenantKey).(tenant)
				logger.Info("dry run: would have denied", "tenant", t.name, "path", r.URL.Path,
					"limit", rep.Result.Limit.String(), "err", rep.Err, "total", wouldDeny.Add(1))
			}
		}),
		httplimit.WithSkip(func(r *http.Request) bool {
			t, _ := r.Context().Value(tenantKey).(tenant)
			return t.plan != "free"
		}))

	mux := http.NewServeMux()
	login := httplimit.New(lim, core.PerMinute(5), keyfunc.IP(), httplimit.WithPenalty(15*time.Minute))
	mux.Handle("POST /login", login(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "welcome") // a real handler checks a password here
	})))
	mux.Handle("/", authenticate(perPlan(freeTrial(api))))

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, tryIt, fmt.Sprintf("http://localhost:%d", ln.Addr().(*net.TCPAddr).Port))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// authenticate looks up the caller's API key and stores its tenant in the
// request's context, or answers 401.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := apiKeys[r.Header.Get("X-API-Key")]
		if !ok {
			http.Error(w, "unknown or missing X-API-Key", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey, t)))
	})
}

const tryIt = `listening on %[1]s; try:
  curl -i -H 'X-API-Key: acme-free-key' %[1]s/reports    # 200, RateLimit-Policy: "free";q=60;w=60
  curl -i -H 'X-API-Key: globex-pro-key' %[1]s/reports   # 200, RateLimit-Policy: "pro";q=600;w=60
  curl -i %[1]s/reports                                  # 401: no API key
the free plan's 60 a minute (the dry run logs the requests past 50):
  for i in $(seq 70); do curl -s -o /dev/null -w '%%{http_code}\n' -H 'X-API-Key: acme-free-key' %[1]s/reports; done | uniq -c
  # about 60 200s, then 429s (the bucket refills one a second as the loop runs)
/login allows 5 a minute per address; going over locks it out for 15 minutes:
  for i in $(seq 7); do curl -s -o /dev/null -w '%%{http_code} ' -X POST %[1]s/login; done; echo
  # 200 200 200 200 200 429 429
  curl -si -X POST %[1]s/login | grep Retry-After
  # Retry-After: 900 (the bucket refills in 12 s, but the lock holds)
`
