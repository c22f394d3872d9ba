package compat

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// TestMiniredisPathsMatchMemory drives paths of keys (decisions,
// reservations and their settlements) through one engine over two stores,
// miniredis and memory, at the same virtual instants, and requires
// identical results: the engine asks each store the same questions, and
// each store answers them alike. (Concurrency caps cannot run on
// miniredis, which lacks LASTSAVE; core's TestConcurrencyMatchesMemory
// holds them to a real Redis.)
func TestMiniredisPathsMatchMemory(t *testing.T) {
	s := newTwoStores(t, core.WithLogger(slog.New(slog.DiscardHandler)))
	onRedis, inMemory := s.onRedis, s.inMemory

	levels := []core.Level{
		{Name: "org", Limits: []core.Limit{core.PerSecond(20).WithBurst(8)}},
		{Name: "team", Limits: []core.Limit{core.PerSecond(6).WithBurst(4)}},
		{Name: "user", Limits: []core.Limit{core.PerSecond(3).WithBurst(3), core.PerMinute(50)}},
	}
	pathOn := func(lim *core.Limiter) *core.PathRule {
		r, err := lim.PreparePath("api", levels...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	paths := [2]*core.PathRule{pathOn(onRedis), pathOn(inMemory)}

	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	type reserved struct {
		rv [2]*core.Reservation
		n  int
	}
	var open []reserved
	var denied, settled int
	steps := stepsOf(3000)
	for i := range steps {
		if r.IntN(3) == 0 {
			d := time.Duration(r.IntN(300_000)) * time.Microsecond
			s.advance(d)
		}
		path := []string{"o" + string(rune('a'+r.IntN(2))), "t" + string(rune('a'+r.IntN(2))), "u" + string(rune('a'+r.IntN(3)))}[:1+r.IntN(3)]
		n := 1 + r.IntN(3)
		var got, want core.Result
		switch op := r.IntN(8); {
		case op < 4:
			var errs [2]error
			got, errs[0] = paths[0].AllowN(ctx, path, n)
			want, errs[1] = paths[1].AllowN(ctx, path, n)
			mustBoth(t, i, errs)
		case op < 6:
			var rv [2]*core.Reservation
			var errs [2]error
			rv[0], errs[0] = paths[0].Reserve(ctx, path, n)
			rv[1], errs[1] = paths[1].Reserve(ctx, path, n)
			mustBoth(t, i, errs)
			got, want = rv[0].Result, rv[1].Result
			if got.Allowed {
				open = append(open, reserved{rv, n})
			}
		case op < 7 && len(open) > 0:
			j := r.IntN(len(open))
			rv, n := open[j].rv, open[j].n
			open = append(open[:j], open[j+1:]...)
			final := r.IntN(n + 3) // a refund, the cost, or a charge beyond it (the smallest Burst is 3)
			mustBoth(t, i, [2]error{rv[0].Settle(ctx, final), rv[1].Settle(ctx, final)})
			settled++
			continue
		default:
			var errs [2]error
			got, errs[0] = paths[0].AllowN(ctx, path, 1)
			want, errs[1] = paths[1].AllowN(ctx, path, 1)
			mustBoth(t, i, errs)
		}
		if got != want {
			t.Fatalf("step %d (path %v, n %d): miniredis %+v, memory %+v", i, path, n, got, want)
		}
		if !got.Allowed {
			denied++
		}
	}
	if denied < steps/20 || settled == 0 {
		t.Fatalf("%d denied, %d settled: the sequence does not reach the paths it is meant to", denied, settled)
	}
	t.Logf("%d steps identical: %d results denied, %d reservations settled", steps, denied, settled)
}

// mustBoth fails step i unless neither store returned an error.
func mustBoth(t *testing.T, i int, errs [2]error) {
	t.Helper()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("step %d: miniredis error %v, memory error %v", i, errs[0], errs[1])
	}
}
