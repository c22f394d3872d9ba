// Command uploads serves an upload endpoint on net/http capped at 2 uploads
// in flight per tenant, across every replica sharing the Redis, beside a
// rate of 60 uploads a minute per tenant. A slow upload holds its slot for
// as long as its body streams in; the limiter renews the slot's lease
// meanwhile, and gives the slot back when the handler returns, also if it
// panics or the client hangs up. It uses an embedded miniredis unless
// REDIS_ADDR is set.
//
//	go run ./examples/uploads [-addr :8080]
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

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoserve"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

const try = `listening on %[1]s; try:
  curl -i -X POST -H 'X-Tenant-ID: acme' %[1]s/upload   # 200
  curl -i -X POST %[1]s/upload                          # 400: no tenant
  # three slow uploads at once (3 MB each at 1 MB/s): two 200s and a 429 (Retry-After: 1)
  for i in 1 2 3; do head -c 3000000 /dev/zero | curl -s -o /dev/null -w '%%{http_code}\n' -X POST -H 'X-Tenant-ID: acme' -T - --limit-rate 1M %[1]s/upload & done; wait
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	return demoserve.Run(ctx, "uploads", args, stdout, try, func(redisAddr string) (demoserve.Server, io.Closer, error) {
		// Your go-redis client, and one engine for every middleware.
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
		// 60 uploads a minute per tenant, and at most 2 in flight at once.
		// RateLimit-Policy says both: "uploads/min";q=60;w=60, "uploads";q=2;qu="concurrent-requests".
		perTenant := httplimit.New(lim, core.PerMinute(60).WithName("uploads/min"), keyfunc.Tenant("X-Tenant-ID"),
			httplimit.WithConcurrency(core.ConcurrencyLimit{Name: "uploads", Max: 2}),
			httplimit.WithHeaders(policy.HeadersIETF),
			httplimit.WithScope("uploads"),
		)
		mux := http.NewServeMux()
		mux.Handle("POST /upload", perTenant(http.HandlerFunc(upload)))
		return demoserve.HTTP(mux), rdb, nil
	})
}

// upload stores the request's body (here: counts it). The request holds
// its slot for as long as the body streams in.
func upload(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 1<<30))
	if err != nil {
		http.Error(w, "the upload was cut short", http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "stored %d bytes for %s\n", n, r.Header.Get("X-Tenant-ID"))
}
