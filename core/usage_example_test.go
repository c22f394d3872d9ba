package core_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core"
)

// PeekMany reads many keys' remaining quota at once, writing nothing: in
// Redis one round trip per node.
func ExampleRule_PeekMany() {
	lim, _ := core.NewMemory()
	ctx := context.Background()
	plan, _ := lim.Prepare(core.PerMinute(10))
	plan.AllowN(ctx, "tenant:acme", 4)
	plan.AllowN(ctx, "tenant:globex", 9)
	keys := []string{"tenant:acme", "tenant:globex", "tenant:initech"}
	usage, _ := plan.PeekMany(ctx, keys)
	for i, res := range usage {
		fmt.Println(keys[i], "remaining:", res.Remaining)
	}
	// Output:
	// tenant:acme remaining: 6
	// tenant:globex remaining: 1
	// tenant:initech remaining: 10
}

// PathRule.Peek shows each level's remaining quota, and PathRule.Reset
// starts an organisation's monthly quota afresh at its billing cycle.
func ExamplePathRule_Peek() {
	lim, _ := core.NewMemory()
	ctx := context.Background()
	api, _ := lim.PreparePath("api",
		core.Level{Name: "org", Limits: []core.Limit{core.PerCalendarMonth(1000, "UTC")}},
		core.Level{Name: "user", Limits: []core.Limit{core.PerMinute(20)}})
	for range 15 {
		api.Allow(ctx, "acme", "alice")
	}
	levels, _ := api.Peek(ctx, "acme", "alice")
	for _, res := range levels {
		fmt.Println(res.Level, "remaining:", res.Remaining)
	}
	api.Reset(ctx, "acme") // the organisation's level only
	levels, _ = api.Peek(ctx, "acme", "alice")
	fmt.Println("after Reset:", levels[0].Level, levels[0].Remaining, levels[1].Level, levels[1].Remaining)
	// Output:
	// org remaining: 985
	// user remaining: 5
	// after Reset: org 1000 user 5
}

// InFlight counts a cap's slots held now, writing nothing.
func ExampleConcurrency_InFlight() {
	lim, _ := core.NewMemory()
	ctx := context.Background()
	exports, _ := lim.PrepareConcurrency(core.ConcurrencyLimit{Name: "exports", Max: 3})
	first, _ := exports.Acquire(ctx, "tenant:acme")
	exports.Acquire(ctx, "tenant:acme")
	n, _ := exports.InFlight(ctx, "tenant:acme")
	fmt.Println("in flight:", n)
	first.Release(ctx)
	n, _ = exports.InFlight(ctx, "tenant:acme")
	fmt.Println("after a release:", n)
	// Output:
	// in flight: 2
	// after a release: 1
}
