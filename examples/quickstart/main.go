// Command quickstart shows one limit held across replicas: three Limiter
// instances, each with its own Redis connection as separate pods would have,
// share a 10-per-second bucket per tenant.
//
// It uses an embedded miniredis unless REDIS_ADDR names a real Redis:
//
//	go run ./examples/quickstart
//	REDIS_ADDR=localhost:6379 go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"github.com/redis/go-redis/v9"
	"io"
	"log"
	"os"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoredis"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, stdout io.Writer) error {
	srv, err := demoredis.Start(stdout)
	if err != nil {
		return err
	}
	defer srv.Close()
	limit := core.PerSecond(10)
	tenant := fmt.Sprintf("tenant:demo-%d", time.Now().UnixNano())

	var replicas []*core.Limiter
	for range 3 {
		// One client per replica. ContextTimeoutEnabled lets the
		// limiter's 50ms budget reach the socket, and MaxRetries -1 keeps
		// a lost reply from being retried and charged twice; core.New
		// takes a client without them too, and says so once.
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer rdb.Close()
		lim, err := core.New(rdb)
		if err != nil {
			return err
		}
		defer lim.Close()
		// Ready is what a readiness probe calls: it checks the server,
		// loads the scripts and opens the connections, so the first
		// decisions do not spend their budget on handshakes.
		if err := lim.Ready(ctx); err != nil {
			return err
		}
		replicas = append(replicas, lim)
	}

	// 15 requests at once, spread over the replicas: the shared bucket
	// admits its burst of 10, whichever replica serves them.
	admitted := make([]int, len(replicas))
	local := 0
	for i := range 15 {
		r := i % len(replicas)
		res, err := replicas[r].Allow(ctx, tenant, limit)
		if err != nil {
			return err
		}
		if res.Allowed {
			admitted[r]++
		}
		note := ""
		if res.Degraded {
			// Redis answered past the 50ms budget (on a busy machine the
			// embedded miniredis can): the replica decided alone.
			local++
			note = " (decided locally: Redis answered too late)"
		}
		fmt.Fprintf(stdout, "request %2d via replica %d: allowed=%-5v remaining=%d retry-after=%v%s\n",
			i+1, r, res.Allowed, res.Remaining, res.RetryAfter.Round(time.Millisecond), note)
	}
	fmt.Fprintf(stdout, "admitted per replica %v: %d in all, the limit's burst of %d\n",
		admitted, admitted[0]+admitted[1]+admitted[2], limit.Burst)
	if local > 0 {
		fmt.Fprintf(stdout, "%d decisions were made locally, without the shared bucket\n", local)
	}
	return nil
}
