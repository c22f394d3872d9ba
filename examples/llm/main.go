// Command llm serves an LLM-style completion endpoint on net/http that
// charges each tenant the tokens it really generated: 1,000 tokens a minute
// per tenant, across every replica sharing the Redis. A request reserves
// its worst case (max_tokens) before the handler runs, so that a tenant
// cannot start more work than its budget covers; once the handler has
// generated the completion it records the tokens it used with
// httplimit.SetCost, and the middleware refunds the rest, atomically in
// Redis (httplimit.WithFinalCost). It uses an embedded miniredis unless
// REDIS_ADDR is set.
//
//	go run ./examples/llm [-addr :8080]
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoserve"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

const try = `listening on %[1]s; try:
  curl -i -X POST -H 'X-Tenant-ID: acme' '%[1]s/complete?max_tokens=800&prompt=hello+world'        # 200: 80 tokens charged, not 800
  curl -i -X POST -H 'X-Tenant-ID: acme' '%[1]s/complete?max_tokens=800&prompt=tell+me+a+story'    # 200: 160 more
  curl -i -X POST -H 'X-Tenant-ID: acme' '%[1]s/complete?max_tokens=800&prompt=again'              # 429: 760 left, the worst case does not fit
  curl -i -X POST -H 'X-Tenant-ID: acme' '%[1]s/complete?max_tokens=500&prompt=again'              # 200: a smaller worst case does
  curl -i -X POST -H 'X-Tenant-ID: acme' '%[1]s/complete?max_tokens=0'                             # 400: max_tokens out of range
`

// budget is each tenant's token budget: 1,000 a minute, all of it at once.
var budget = core.PerMinute(1000).WithName("tokens")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	return demoserve.Run(ctx, "llm", args, stdout, try, func(redisAddr string) (demoserve.Server, io.Closer, error) {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
		// A second's budget, not the default 50 ms: the settlement that
		// refunds a request must not be lost to a busy machine, where
		// the embedded Redis shares this process's CPU (a settlement
		// that fails keeps the charge, which errs toward denying).
		lim, err := core.New(rdb, core.WithTimeout(time.Second))
		if err != nil {
			return nil, rdb, err
		}
		// Ready, as a readiness probe calls it: the scripts are loaded and
		// connections open before the first request spends its budget.
		if err := lim.Ready(ctx); err != nil {
			return nil, rdb, err
		}
		tokens := httplimit.New(lim, budget, keyfunc.Tenant("X-Tenant-ID"),
			// Reserve the worst case...
			httplimit.WithCost(func(r *http.Request) int { return maxTokens(r) }),
			// ...and charge what the handler recorded.
			httplimit.WithFinalCost(func(r *http.Request, resp policy.Response) int {
				if n, ok := resp.Cost(); ok {
					return n
				}
				return resp.Reserved
			}),
			httplimit.WithQuotaUnit("content-bytes"), // tokens are no unit the draft registers; say it is not requests
			httplimit.WithHeaders(policy.HeadersIETF),
			httplimit.WithScope("completions"),
		)
		mux := http.NewServeMux()
		mux.Handle("POST /complete", checkMax(tokens(http.HandlerFunc(complete))))
		return demoserve.HTTP(mux), rdb, nil
	})
}

// maxTokens is the request's max_tokens, or 0 when it has none that
// parses.
func maxTokens(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("max_tokens"))
	if err != nil {
		return 0
	}
	return n
}

// checkMax answers 400 for a max_tokens the budget could never cover,
// before the limiter sees the request (which would answer 500: a cost out
// of range is a misconfiguration to it).
func checkMax(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := maxTokens(r); n < 1 || n > budget.Burst {
			http.Error(w, fmt.Sprintf("max_tokens must be from 1 to %d", budget.Burst), http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// complete "generates" 40 tokens per word of the prompt, at most
// max_tokens, streams them, and records how many it used.
func complete(w http.ResponseWriter, r *http.Request) {
	words := strings.Fields(r.URL.Query().Get("prompt"))
	used := min(40*max(1, len(words)), maxTokens(r))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	for i := range used {
		fmt.Fprintf(w, "token%d ", i)
		if (i+1)%100 == 0 {
			http.NewResponseController(w).Flush() // streamed: the header fields are long gone when the cost is known
		}
	}
	fmt.Fprintf(w, "\n%d tokens\n", used)
	httplimit.SetCost(r.Context(), used)
}
