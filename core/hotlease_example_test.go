package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
)

// A limit every replica draws on, such as the quota of an upstream API,
// makes one hot key: with token leases each replica decides most requests
// from tokens it took out of the bucket ahead, at memory speed, and never
// admits more than the limit.
func ExampleRule_WithTokenLeases() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := core.New(rdb, core.WithTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	defer lim.Close() // gives back the tokens in hand

	upstream, err := lim.Prepare(core.PerSecond(2000).WithName("upstream"))
	if err != nil {
		panic(err)
	}
	// Accept at most 5% of the burst kept from callers by leases.
	hot, err := upstream.WithTokenLeases(core.LeaseBound{Fraction: 0.05})
	if err != nil {
		panic(err)
	}
	tokens, life := hot.LeaseBound()
	fmt.Printf("bound %d tokens; a lease lives %v\n", tokens, life)

	ctx := context.Background()
	start := time.Now()
	admitted := 0
	for range 5000 {
		res, err := hot.Allow(ctx, "api.example.com")
		if err != nil {
			panic(err)
		}
		if res.Allowed {
			admitted++
		}
	}
	most := 2000 + int(2000*time.Since(start).Seconds()) + 1 // Burst + Rate·t
	fmt.Println("within the limit:", admitted <= most)
	// Output:
	// bound 100 tokens; a lease lives 25ms
	// within the limit: true
}
