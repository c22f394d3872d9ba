package compat

import (
	"context"
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

// TestMiniredisUsageMatchesMemory drives one engine over two stores,
// miniredis and memory, at the same virtual instants: a path whose
// organisation level has a calendar month's quota, and its levels' keys
// read many at once. PathRule.Peek, PathRule.Reset and PeekMany answer
// alike on both, and PeekMany answers what Peek does key by key.
func TestMiniredisUsageMatchesMemory(t *testing.T) {
	now := time.Date(2027, 1, 31, 14, 0, 0, 0, time.UTC) // the month ends during the run
	monthly := core.PerCalendarMonth(80, "UTC")
	m := miniredis.RunT(t)
	m.SetTime(now)
	clock := func() time.Time { return now }
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	opts := []core.Option{core.WithLogger(slog.New(slog.DiscardHandler))}
	onRedis, err := core.New(virtualWindows{Scripter: rdb, now: clock, quotas: map[string]core.Limit{"80": monthly}}, append(opts, core.WithDenyCache(false), core.WithTimeout(5*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = onRedis.Close() })
	inMemory, err := core.NewMemory(append(opts, core.WithClock(clock))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inMemory.Close() })

	levels := []core.Level{
		{Name: "org", Limits: []core.Limit{monthly}},
		{Name: "user", Limits: []core.Limit{core.PerMinute(10).WithBurst(4)}},
	}
	var paths [2]*core.PathRule
	var rules [2]*core.Rule
	for i, lim := range []*core.Limiter{onRedis, inMemory} {
		if paths[i], err = lim.PreparePath("api", levels...); err != nil {
			t.Fatal(err)
		}
		if rules[i], err = lim.Prepare(core.PerSecond(2).WithBurst(5), monthly); err != nil {
			t.Fatal(err)
		}
	}
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 0))
	steps := stepsOf(2000)
	var denied, resets int
	for i := range steps {
		if r.IntN(4) == 0 {
			d := time.Duration(r.IntN(2000)) * time.Millisecond
			if r.IntN(50) == 0 {
				d = 2 * time.Hour
			}
			now = now.Add(d)
			m.SetTime(now)
			m.FastForward(d)
		}
		org, user := "o"+strconv.Itoa(r.IntN(2)), "u"+strconv.Itoa(r.IntN(3))
		var got, want any
		var errs [2]error
		switch op := r.IntN(10); {
		case op < 4:
			var res [2]core.Result
			res[0], errs[0] = paths[0].Allow(ctx, org, user)
			res[1], errs[1] = paths[1].Allow(ctx, org, user)
			got, want = res[0], res[1]
			if !res[0].Allowed {
				denied++
			}
		case op < 6:
			k := keys[r.IntN(len(keys))]
			var res [2]core.Result
			res[0], errs[0] = rules[0].Allow(ctx, k)
			res[1], errs[1] = rules[1].Allow(ctx, k)
			got, want = res[0], res[1]
		case op < 8:
			path := []string{org, user}[:1+r.IntN(2)]
			var res [2][]core.Result
			res[0], errs[0] = paths[0].Peek(ctx, path...)
			res[1], errs[1] = paths[1].Peek(ctx, path...)
			got, want = res[0], res[1]
			if len(res[0]) != len(path) || !slices.Equal(res[0], res[1]) {
				t.Fatalf("step %d: Peek(%v): miniredis %+v, memory %+v", i, path, res[0], res[1])
			}
		case op < 9:
			var res [2][]core.Result
			res[0], errs[0] = rules[0].PeekMany(ctx, keys)
			res[1], errs[1] = rules[1].PeekMany(ctx, keys)
			mustBoth(t, i, errs)
			if !slices.Equal(res[0], res[1]) {
				t.Fatalf("step %d: PeekMany: miniredis %+v, memory %+v", i, res[0], res[1])
			}
			for j, k := range keys[:5] {
				one, err := rules[0].Peek(ctx, k)
				if err != nil || one != res[0][j] {
					t.Fatalf("step %d: PeekMany(%s) = %+v, Peek = %+v, %v", i, k, res[0][j], one, err)
				}
			}
			continue
		case r.IntN(4) == 0:
			path := []string{org, user}[:1+r.IntN(2)]
			errs = [2]error{paths[0].Reset(ctx, path...), paths[1].Reset(ctx, path...)}
			resets++
		default:
			continue
		}
		mustBoth(t, i, errs)
		if _, ok := got.([]core.Result); !ok && got != want {
			t.Fatalf("step %d: miniredis %+v, memory %+v", i, got, want)
		}
	}
	if denied < steps/40 || resets == 0 {
		t.Fatalf("%d path requests denied, %d resets: the sequence does not reach what it is meant to", denied, resets)
	}
	t.Logf("%d steps identical: %d path requests denied, %d resets", steps, denied, resets)
}
