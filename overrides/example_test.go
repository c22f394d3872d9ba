package overrides_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/overrides"
)

// An operator raises one tenant's limit at run time: every replica reads
// the change within the refresh interval, and decisions cost no extra
// round trip.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	lim, err := core.New(rdb, core.WithTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	plans, err := overrides.New(lim, "plans", overrides.WithRefresh(100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer plans.Close()
	ctx := context.Background()

	// The operator's side (the sluice command does the same).
	pro, err := overrides.Parse("50/m burst 10")
	if err != nil {
		panic(err)
	}
	if err := plans.Set(ctx, "tenant:acme", pro); err != nil {
		panic(err)
	}
	if err := plans.Set(ctx, "tenant:mallory", overrides.Override{Deny: true}); err != nil {
		panic(err)
	}

	// The request path: a local lookup, then one decision.
	limitFor := func(key string) []core.Limit {
		if o, ok := plans.Lookup(key); ok && len(o.Limits) > 0 {
			return o.Limits
		}
		return []core.Limit{core.PerMinute(5)}
	}
	for _, key := range []string{"tenant:acme", "tenant:other"} {
		res, err := lim.Allow(ctx, key, limitFor(key)...)
		if err != nil {
			panic(err)
		}
		text, _ := res.Limit.MarshalText()
		fmt.Printf("%s: allowed %v, limit %s, remaining %d\n", key, res.Allowed, text, res.Remaining)
	}
	o, _ := plans.Lookup("tenant:mallory")
	fmt.Println("tenant:mallory:", o, "| version", plans.Version())
	// Output:
	// tenant:acme: allowed true, limit 50/m burst 10, remaining 9
	// tenant:other: allowed true, limit 5/m, remaining 4
	// tenant:mallory: deny | version 2
}
