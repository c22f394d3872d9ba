package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
)

// A quota of 3 requests per calendar day in New York, beside a rolling
// per-second limit, on a stopped clock: the quota is spent, and it returns
// at New York's midnight, which RetryAfter points to.
func ExamplePerCalendarDay() {
	ny, _ := time.LoadLocation("America/New_York")
	now := time.Date(2026, 3, 7, 22, 30, 0, 0, ny) // the evening before DST starts
	lim, err := core.NewMemory(core.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	ctx := context.Background()
	rule, err := lim.Prepare(core.PerSecond(10), core.PerCalendarDay(3, "America/New_York"))
	if err != nil {
		panic(err)
	}
	res, _ := rule.AllowN(ctx, "tenant:acme", 3)
	fmt.Println("3 requests:", res.Allowed, "remaining", res.Remaining, "by", res.Limit)
	res, _ = rule.Allow(ctx, "tenant:acme")
	fmt.Println("a 4th:", res.Allowed, "until", now.Add(res.RetryAfter).Format("2006-01-02 15:04 MST"))

	now = now.Add(res.RetryAfter) // local midnight: a day of 23 hours begins
	res, _ = rule.Allow(ctx, "tenant:acme")
	fmt.Println("at midnight:", res.Allowed, "remaining", res.Remaining, "full again at", now.Add(res.ResetAfter).In(ny).Format("2006-01-02 15:04 MST"))
	// Output:
	// 3 requests: true remaining 0 by 3/calendar-day zone America/New_York
	// a 4th: false until 2026-03-08 00:00 EST
	// at midnight: true remaining 2 full again at 2026-03-09 00:00 EDT
}

// An organisation's monthly quota of model tokens, charged by the tokens
// a request actually generated: each request reserves its prompt's
// estimate, and settles with the real count when the answer is done. A
// request admitted in January is January's, even when it ends in
// February.
func ExampleRule_Reserve_monthlyTokens() {
	now := time.Date(2027, 1, 31, 23, 58, 0, 0, time.UTC)
	lim, err := core.NewMemory(core.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	ctx := context.Background()
	tokens, err := lim.Prepare(core.PerCalendarMonth(100_000, "UTC"))
	if err != nil {
		panic(err)
	}
	rv, _ := tokens.Reserve(ctx, "org:acme", 2_000) // the estimate
	fmt.Println("reserved:", rv.Result.Allowed, "left", rv.Result.Remaining)
	_ = rv.Settle(ctx, 1_250) // the model generated 1,250 tokens
	res, _ := tokens.Peek(ctx, "org:acme")
	fmt.Println("January after 1250:", res.Remaining)

	long, _ := tokens.Reserve(ctx, "org:acme", 2_000)
	now = now.Add(5 * time.Minute) // the answer streams past midnight
	_ = long.Settle(ctx, 6_000)
	res, _ = tokens.Peek(ctx, "org:acme")
	fmt.Println("February, after January's last answer:", res.Remaining)
	// Output:
	// reserved: true left 98000
	// January after 1250: 98750
	// February, after January's last answer: 100000
}
