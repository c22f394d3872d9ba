// Command calendar shows a quota per calendar day in each tenant's own
// time zone, beside a per-second limit, decided together in one atomic
// call: 1,000 requests a day, restored at the tenant's local midnight
// (a 23- or 25-hour day across a DST change included), and at most 500
// a second.
//
// It uses an embedded miniredis unless REDIS_ADDR names a real Redis:
//
//	go run ./examples/calendar
//	REDIS_ADDR=localhost:6379 go run ./examples/calendar
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoredis"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// tenant is a customer with a daily quota in its own time zone.
type tenant struct {
	name, zone string
}

func run(ctx context.Context, stdout io.Writer) error {
	srv, err := demoredis.Start(stdout)
	if err != nil {
		return err
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	// A second's budget, not the default 50 ms: this demo is about
	// quotas, and an embedded Redis shares this process's CPU, so on a
	// busy machine a decision could outlive 50 ms and be decided by the
	// local fallback, which knows nothing of the day's count.
	lim, err := core.New(rdb, core.WithTimeout(time.Second))
	if err != nil {
		return err
	}
	defer lim.Close()
	// Ready, as a readiness probe calls it: the scripts are loaded and
	// connections open before the first request spends its budget.
	if err := lim.Ready(ctx); err != nil {
		return err
	}

	run := time.Now().UnixNano() // fresh keys on a shared Redis
	for _, tn := range []tenant{{"acme", "America/New_York"}, {"kaiju", "Asia/Tokyo"}} {
		loc, err := time.LoadLocation(tn.zone)
		if err != nil {
			return err
		}
		// Both limits on one key, in one script call: a request is
		// admitted only if both admit it, and then counts against both.
		// The limits could come from configuration as text too:
		// core.ParseLimit("1000/calendar-day zone " + tn.zone).
		rule, err := lim.Prepare(core.PerSecond(500), core.PerCalendarDay(1000, tn.zone))
		if err != nil {
			return err
		}
		key := fmt.Sprintf("tenant:%s:%d", tn.name, run)

		// A burst: the per-second limit admits its 500 (and the few that
		// trickle back meanwhile), then denies for a few milliseconds.
		admitted := 0
		var res core.Result
		for admitted < 1000 {
			if res, err = rule.Allow(ctx, key); err != nil {
				return err
			}
			if !res.Allowed {
				break
			}
			admitted++
		}
		fmt.Fprintf(stdout, "%s (%s): a burst: %d admitted, then denied by %v for %v\n",
			tn.name, tn.zone, admitted, res.Limit, res.RetryAfter.Round(time.Millisecond))

		// Spend the rest of the day's quota: a Wait takes its tokens as
		// the per-second limit refills (about a second), 500 at most at
		// a time, the per-second burst.
		for rest := 1000 - admitted; rest > 0; rest -= min(rest, 500) {
			if res, err = rule.Wait(ctx, key, min(rest, 500)); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s: waited %v for %d more: %d left today\n", tn.name, res.Wait.Round(10*time.Millisecond), min(rest, 500), res.Remaining)
		}

		res, err = rule.Allow(ctx, key)
		if err != nil {
			return err
		}
		now := time.Now()
		start, end := core.PerCalendarDay(1000, tn.zone).Window(now)
		fmt.Fprintf(stdout, "%s: one more today (%s): allowed %v, by %v;\n  retry at %s, local midnight (today lasts %v)\n",
			tn.name, now.In(loc).Format("Mon Jan 2"), res.Allowed, res.Limit,
			now.Add(res.RetryAfter).Round(time.Second).In(loc).Format("2006-01-02 15:04:05 MST"), end.Sub(start))
	}
	return nil
}
