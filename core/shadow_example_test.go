package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
)

func ExampleRule_WithShadowLimits() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, _ := core.New(rdb, core.WithTimeout(time.Second))
	ctx := context.Background()
	// The limit enforced today, and two lower ones tried beside it: they
	// are decided in the same script call, in buckets of their own, and
	// never change what the enforced limit decides.
	today, _ := lim.Prepare(core.PerMinute(600).WithName("today"))
	rule, err := today.WithShadowLimits(core.PerMinute(3).WithName("lower"), core.PerMinute(5).WithName("lowest-but-one"))
	if err != nil {
		panic(err)
	}
	wouldDeny := map[string]int{}
	for i := 1; i <= 6; i++ {
		res, err := rule.Allow(ctx, "tenant:acme")
		if err != nil {
			panic(err)
		}
		var denied []string
		for j := range res.Shadow.Len() {
			if res.Shadow.Denied(j) {
				name := res.Shadow.Limit(j).Name
				denied = append(denied, name)
				wouldDeny[name]++
			}
		}
		fmt.Printf("request %d: admitted %v, shadow limits that would deny: %v\n", i, res.Allowed, denied)
	}
	fmt.Println("would-deny counts:", wouldDeny)
	// Output:
	// request 1: admitted true, shadow limits that would deny: []
	// request 2: admitted true, shadow limits that would deny: []
	// request 3: admitted true, shadow limits that would deny: []
	// request 4: admitted true, shadow limits that would deny: [lower]
	// request 5: admitted true, shadow limits that would deny: [lower]
	// request 6: admitted true, shadow limits that would deny: [lower lowest-but-one]
	// would-deny counts: map[lower:3 lowest-but-one:1]
}
