package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Top reads a limit's heaviest keys by admitted cost and by denials, with
// the error bound of every count (0 here: fewer keys than counters, so the
// counts are exact). Without TopTalkers.Names, keys show as their hashes;
// TopKeyHash finds a suspect among them.
func ExampleLimiter_Top() {
	lim, err := core.NewMemory(core.WithTopTalkers(core.TopTalkers{K: 3, Names: true}))
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	ctx := context.Background()
	search := core.Limit{Name: "search", Rate: 10, Period: time.Minute, Burst: 10}
	for key, requests := range map[string]int{"tenant:acme": 25, "tenant:globex": 12, "tenant:initech": 4, "tenant:hooli": 1} {
		for range requests {
			lim.Allow(ctx, key, search)
		}
	}
	top, err := lim.Top(ctx, "search", 3)
	if err != nil {
		panic(err)
	}
	fmt.Printf("admitted %d (±%d), denied %d (±%d)\n", top.Admitted, top.AdmittedError, top.Denied, top.DeniedError)
	for _, t := range top.ByDenied {
		fmt.Printf("denied %2d  admitted %2d  %s\n", t.Denied, t.Admitted, t.Label())
	}
	fmt.Println(top.ByDenied[0].Hash == core.TopKeyHash("tenant:acme"))
	// Output:
	// admitted 25 (±0), denied 17 (±0)
	// denied 15  admitted 10  tenant:acme
	// denied  2  admitted 10  tenant:globex
	// true
}
