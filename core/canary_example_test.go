package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
)

func ExampleRule_WithEnforce() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, _ := core.New(rdb, core.WithTimeout(time.Second))
	ctx := context.Background()
	// A new, lower limit, enforced on a quarter of tenants first; the
	// others are decided as in a dry run and reported as would-deny.
	lower, _ := lim.Prepare(core.PerMinute(2))
	canary, err := lower.WithEnforce(0.25)
	if err != nil {
		panic(err)
	}
	for _, tenant := range []string{"tenant:acme", "tenant:globex", "tenant:initech", "tenant:umbrella"} {
		var res core.Result
		for range 3 { // the third request is over the limit
			res, _ = canary.Allow(ctx, tenant)
		}
		switch {
		case res.Allowed:
			fmt.Println(tenant, "admitted")
		case res.DryRun: // the caller lets it through, and logs or counts it
			fmt.Println(tenant, "would be denied: not in the canary yet")
		default:
			fmt.Println(tenant, "denied, retry in", upToSecond(res.RetryAfter))
		}
	}
	// Output:
	// tenant:acme would be denied: not in the canary yet
	// tenant:globex would be denied: not in the canary yet
	// tenant:initech would be denied: not in the canary yet
	// tenant:umbrella denied, retry in 30s
}
