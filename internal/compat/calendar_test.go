package compat

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
)

// virtualWindows is a redis.Scripter that moves a limiter's calendar
// windows to a virtual clock. The limiter computes a calendar limit's
// windows around its own clock (the process's), and the script refuses
// windows that do not hold Redis's; with miniredis on a virtual clock
// (SetTime), this rewrites each calendar limit's arguments (see the
// layout table at the top of core/internal/redisstore/bucket.lua) to the windows around the
// virtual instant, computed here from the limits (found by their quota,
// unique in the test) with Limit.Window and the documented window
// indexes.
type virtualWindows struct {
	redis.Scripter
	now    func() time.Time
	quotas map[string]core.Limit // a calendar limit by its quota, as text
}

func (v virtualWindows) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return v.Scripter.EvalSha(ctx, sha, keys, v.rewrite(args)...)
}

func (v virtualWindows) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return v.Scripter.Eval(ctx, script, keys, v.rewrite(args)...)
}

// rewrite returns args with every calendar limit's windows moved.
func (v virtualWindows) rewrite(args []any) []any {
	if len(args) < 8 {
		return args // the lone form: one continuous limit
	}
	args = slices.Clone(args)
	str := func(i int) string { s, _ := args[i].(string); return s }
	ngroups, _ := strconv.Atoi(str(0))
	at := 1
	for range ngroups {
		nlimits, _ := strconv.Atoi(str(at + 3))
		at += 4
		for range nlimits {
			switch str(at) {
			case "0":
				at += 4
			case "-1":
				l := v.quotas[str(at+1)]
				first, starts := windowsAround(l, v.now())
				args[at+3] = strconv.FormatInt(first, 10)
				for j, s := range starts {
					args[at+4+j] = strconv.FormatInt(s.UnixMicro(), 10)
				}
				at += 9
			default:
				at += 3
			}
		}
	}
	return args
}

// windowsAround returns the index of the window before the one holding
// now, and the starts of five windows from it.
func windowsAround(l core.Limit, now time.Time) (int64, [5]time.Time) {
	start, _ := l.Window(now)
	prev, _ := l.Window(start.Add(-time.Microsecond))
	var starts [5]time.Time
	starts[0] = prev
	for j := 1; j < 5; j++ {
		_, end := l.Window(starts[j-1])
		starts[j] = end
	}
	y, m, d := prev.Date() // in the limit's zone
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
	switch l.Refill {
	case core.RefillWeekly:
		return (day + 3) / 7, starts // days from 1970-01-01, a Thursday; no week before 1970 here
	case core.RefillMonthly:
		return int64(y)*12 + int64(m) - 1, starts
	}
	return day, starts
}

// TestMiniredisSteppedMatchesMemory drives a limiter on miniredis and one
// in memory through the same random calls on stepped limits at the same
// virtual instants, across New York's DST changes and month ends, and
// requires identical results.
func TestMiniredisSteppedMatchesMemory(t *testing.T) {
	limitSets := [][]core.Limit{
		{core.PerCalendarDay(8, "America/New_York")},
		{core.PerSecond(10).WithBurst(3), core.PerCalendarDay(40, "America/New_York")},
		{core.PerCalendarMonth(300, "UTC"), core.PerInterval(2, time.Minute).WithBurst(4)},
		{core.PerCalendarWeek(50, "Europe/Berlin"), core.PerHour(100)},
		{core.PerInterval(3, 2*time.Second).WithBurst(5)},
	}
	quotas := map[string]core.Limit{}
	for _, ls := range limitSets {
		for _, l := range ls {
			if l.Refill != core.RefillContinuous && l.Refill != core.RefillInterval {
				quotas[strconv.Itoa(l.Rate)] = l
			}
		}
	}
	for _, base := range []string{"2026-03-07T20:00:00-05:00", "2026-10-31T20:00:00-04:00", "2026-01-30T20:00:00Z", "2026-02-27T20:00:00Z"} {
		t.Run(base, func(t *testing.T) {
			now, err := time.Parse(time.RFC3339, base)
			if err != nil {
				t.Fatal(err)
			}
			m := miniredis.RunT(t)
			m.SetTime(now)
			clock := func() time.Time { return now }
			rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			ender := &endWait{}
			opts := []core.Option{core.WithPenalty(20 * time.Minute), core.WithLogger(slog.New(slog.DiscardHandler)), core.WithObserver(ender)}
			onRedis, err := core.New(virtualWindows{Scripter: rdb, now: clock, quotas: quotas}, append(opts, core.WithDenyCache(false), core.WithTimeout(5*time.Second))...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = onRedis.Close() })
			inMemory, err := core.NewMemory(append(opts, core.WithClock(clock))...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = inMemory.Close() })
			ctx := context.Background()
			wait := func(lim *core.Limiter, key string, n int, limits []core.Limit) (core.Result, error) {
				ctx, cancel := context.WithCancel(ctx)
				ender.cancel = cancel
				defer func() { cancel(); ender.cancel = nil }()
				res, err := lim.Wait(ctx, key, n, limits...)
				if errors.Is(err, context.Canceled) && res.Allowed {
					err = nil
				}
				return res, err
			}
			r := rand.New(rand.NewPCG(3, uint64(now.Unix())))
			start := now
			var denied, waited int
			steps := stepsOf(2500)
			for i := range steps {
				if r.IntN(3) == 0 {
					d := time.Duration(r.Int64N(400_000)) * time.Microsecond
					if r.IntN(10) == 0 {
						d = time.Duration(r.Int64N(4*3600)) * time.Second
					}
					now = now.Add(d)
					m.SetTime(now)
					m.FastForward(d)
				}
				limits := limitSets[r.IntN(len(limitSets))]
				key := []string{"a", "b"}[r.IntN(2)]
				most := 3
				for _, l := range limits {
					most = min(most, l.Burst)
				}
				n := 1 + r.IntN(most)
				var got, want core.Result
				var gerr, werr error
				switch op := r.IntN(10); {
				case op < 7:
					got, gerr = onRedis.AllowN(ctx, key, n, limits...)
					want, werr = inMemory.AllowN(ctx, key, n, limits...)
				case op < 8:
					// A wait at most until the next day: Wait reserves
					// without sleeping (ender ends it).
					got, gerr = wait(onRedis, key, n, limits)
					want, werr = wait(inMemory, key, n, limits)
					if got.Wait > 0 {
						waited++
					}
				default:
					got, gerr = onRedis.Peek(ctx, key, limits...)
					want, werr = inMemory.Peek(ctx, key, limits...)
				}
				if gerr != nil || werr != nil {
					t.Fatalf("step %d at %s: miniredis error %v, memory error %v", i, now, gerr, werr)
				}
				if got != want {
					t.Fatalf("step %d at %s (key %s, n %d, limits %v): miniredis %+v, memory %+v", i, now, key, n, limits, got, want)
				}
				if !got.Allowed {
					denied++
				}
			}
			if denied < steps/20 || waited == 0 {
				t.Fatalf("%d of %d denied, %d waited: the sequence misses the paths it is meant to reach", denied, steps, waited)
			}
			t.Logf("%d results identical from %s to %s, %d denied, %d waited", steps, start, now, denied, waited)
		})
	}
}

// TestMiniredisCalendarClockSkew: when Redis's clock is more than a period
// from the limiter's, a calendar quota's windows cannot be trusted: the
// script refuses them (on gopher-lua too), and the local fallback decides.
func TestMiniredisCalendarClockSkew(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(time.Now().Add(-72 * time.Hour))
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	lim, err := core.New(rdb, core.WithLogger(slog.New(slog.DiscardHandler)), core.WithTimeout(5*time.Second), core.WithFallbackReplicas(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	res, err := lim.Allow(context.Background(), "k", core.PerCalendarDay(5, "UTC"))
	if err != nil || !res.Allowed || !res.Degraded {
		t.Fatalf("Allow with Redis 3 days behind: %+v, %v; want admitted by the fallback", res, err)
	}
	res, err = lim.Allow(context.Background(), "k", core.PerSecond(5))
	if err != nil || !res.Allowed {
		t.Fatalf("a continuous limit meanwhile: %+v, %v; want admitted", res, err)
	}
}
