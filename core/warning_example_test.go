package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
)

func ExampleRule_WithWarning() {
	now := time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC)
	lim, _ := core.NewMemory(
		core.WithClock(func() time.Time { return now }),
		// Told once per key, limit and window across the fleet (on a
		// Redis-backed limiter, across every replica).
		core.WithThresholdHandler(func(ev core.ThresholdEvent) {
			fmt.Printf("event: %s used %.0f%% of %s; next event after %s\n", ev.Key, ev.Threshold*100, ev.Limit, ev.Window)
		}))
	plan, _ := lim.Prepare(core.PerMinute(10))
	plan, err := plan.WithWarning(0.8)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 11; i++ {
		res, _ := plan.Allow(ctx, "tenant:acme")
		if res.Warning || !res.Allowed {
			fmt.Printf("request %d: allowed %v, warning %v, %d left\n", i, res.Allowed, res.Warning, res.Remaining)
		}
	}
	// Output:
	// event: tenant:acme used 80% of 10/1m0s burst 10; next event after 48s
	// request 8: allowed true, warning true, 2 left
	// request 9: allowed true, warning true, 1 left
	// request 10: allowed true, warning true, 0 left
	// request 11: allowed false, warning false, 0 left
}
