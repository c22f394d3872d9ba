package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
)

// A tree of quotas decided as one: an organisation's monthly quota in its
// own zone, a team's rate, a user's burst. The user's third request is
// denied by the user level, and the organisation is charged for the two
// admitted only.
func ExampleLimiter_PreparePath() {
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	lim, err := core.NewMemory(core.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	tree, err := lim.PreparePath("api",
		core.Level{Name: "org", Limits: []core.Limit{core.PerCalendarMonth(1000, "Asia/Tokyo").WithName("monthly")}},
		core.Level{Name: "team", Limits: []core.Limit{core.PerSecond(20)}},
		core.Level{Name: "user", Limits: []core.Limit{core.PerMinute(60).WithBurst(2).WithName("burst")}},
	)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		res, _ := tree.Allow(ctx, "acme", "eng", "alice")
		fmt.Println(res.Allowed, "decided by", res.Level, res.Limit.Name, "remaining", res.Remaining)
	}
	res, _ := tree.Allow(ctx, "acme") // the organisation alone
	fmt.Println("acme:", res.Remaining, "left this month")
	// Output:
	// true decided by user burst remaining 1
	// true decided by user burst remaining 0
	// false decided by user burst remaining 0
	// acme: 997 left this month
}
