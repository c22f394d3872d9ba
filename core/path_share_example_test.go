package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
)

// An upstream of 10 a minute shared by tenants, with a critical class
// that holds half its burst from the rest: the rest take five, then are
// refused for the reserve, and a critical request still passes.
func ExamplePathRule_InClass() {
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	lim, err := core.NewMemory(core.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	up, err := lim.PreparePath("api",
		core.Level{Name: "upstream", Limits: []core.Limit{core.PerMinute(10)}, Share: &core.Share{
			Fair:    true,
			Classes: []core.Class{{Name: "critical", Reserve: 0.5}, {Name: "rest"}},
		}},
		core.Level{Name: "tenant", Limits: []core.Limit{core.PerMinute(100)}},
	)
	if err != nil {
		panic(err)
	}
	rest, err := up.InClass("rest")
	if err != nil {
		panic(err)
	}
	critical, err := up.InClass("critical")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	admitted := 0
	var res core.Result
	for range 6 {
		if res, _ = rest.Allow(ctx, "upstream", "acme"); res.Allowed {
			admitted++
		}
	}
	fmt.Println("rest:", admitted, "admitted, then refused for the", res.Reason, "at the", res.Level, "level")
	res, _ = critical.Allow(ctx, "upstream", "globex")
	fmt.Println("critical:", res.Allowed, res.Class)
	// Output:
	// rest: 5 admitted, then refused for the class reserve at the upstream level
	// critical: true critical
}
