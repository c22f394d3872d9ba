package compat

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// TestMiniredisSettleMatchesMemory drives reservations, settlements
// (refunds, exact costs and charges into debt), duplicated settlements,
// requests and peeks through a limiter on miniredis and one in memory at
// the same virtual instants, and requires identical results and errors:
// the settle script runs on gopher-lua as the Go model (which core's
// TestSettleDifferential holds to a real Redis) says.
func TestMiniredisSettleMatchesMemory(t *testing.T) {
	settleMatchesMemory(t, [][]core.Limit{
		{core.PerSecond(5)},
		{core.PerSecond(10).WithBurst(3), core.PerMinute(40)},
		{{Name: "odd", Rate: 7, Period: 1300 * time.Millisecond, Burst: 2}},
	})
}

// TestMiniredisSteppedSettleMatchesMemory is TestMiniredisSettleMatchesMemory
// on interval limits, alone and beside continuous ones. The sequence
// stays in the first hour of 2027, so every reservation is settled in
// its window (core's TestSettleSteppedDifferential settles after windows
// roll, against the model on a real Redis).
func TestMiniredisSteppedSettleMatchesMemory(t *testing.T) {
	settleMatchesMemory(t, [][]core.Limit{
		{core.PerInterval(300, time.Hour).WithBurst(320)},
		{core.PerSecond(10).WithBurst(3), core.PerInterval(400, time.Hour)},
	})
}

// settleMatchesMemory is TestMiniredisSettleMatchesMemory on limitSets.
func settleMatchesMemory(t *testing.T, limitSets [][]core.Limit) {
	s := newTwoStores(t, core.WithLogger(slog.New(slog.DiscardHandler)))
	onRedis, inMemory := s.onRedis, s.inMemory
	// Into the hour: a settlement finds its reservation's window on
	// Redis's clock less the time since on the limiter's (the process's,
	// which the virtual clock does not move), which must not reach back
	// past the hour's start.
	s.advance(10 * time.Minute)
	type pair struct{ redis, memory *core.Rule }
	rules := make([]pair, len(limitSets))
	for i, ls := range limitSets {
		a, err := onRedis.Prepare(ls...)
		if err != nil {
			t.Fatal(err)
		}
		b, err := inMemory.Prepare(ls...)
		if err != nil {
			t.Fatal(err)
		}
		rules[i] = pair{a, b}
	}
	type resPair struct {
		redis, memory *core.Reservation
		n, burst      int
	}
	var open, settled []resPair
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	steps := stepsOf(3000)
	var reserved, settles, dups, denied int
	for i := range steps {
		if r.IntN(3) == 0 {
			d := time.Duration(r.IntN(400_000)) * time.Microsecond
			s.advance(d)
		}
		li := r.IntN(len(limitSets))
		rule := rules[li]
		key := []string{"a", "b", "c"}[r.IntN(3)]
		most := 3
		for _, l := range limitSets[li] {
			most = min(most, l.Burst)
		}
		n := 1 + r.IntN(most)
		var got, want core.Result
		var gerr, werr error
		switch op := r.IntN(10); {
		case op < 3:
			got, gerr = rule.redis.AllowN(ctx, key, n)
			want, werr = rule.memory.AllowN(ctx, key, n)
		case op < 6 || len(open) == 0 && len(settled) == 0:
			a, gerr2 := rule.redis.Reserve(ctx, key, n)
			b, werr2 := rule.memory.Reserve(ctx, key, n)
			if gerr2 != nil || werr2 != nil {
				t.Fatalf("step %d: Reserve errors %v, %v", i, gerr2, werr2)
			}
			got, want = a.Result, b.Result
			if got.Allowed {
				reserved++
				open = append(open, resPair{a, b, n, most})
			}
		case op < 8 && len(open) > 0 || len(settled) == 0:
			j := r.IntN(len(open))
			p := open[j]
			open = append(open[:j], open[j+1:]...)
			final := r.IntN(p.n + p.burst + 1)
			gerr, werr = p.redis.Settle(ctx, final), p.memory.Settle(ctx, final)
			settled = append(settled, p)
			settles++
		default:
			p := settled[r.IntN(len(settled))]
			gerr, werr = p.redis.Settle(ctx, 0), p.memory.Settle(ctx, 0)
			if !errors.Is(gerr, core.ErrSettled) || !errors.Is(werr, core.ErrSettled) {
				t.Fatalf("step %d: duplicated Settle = %v (miniredis), %v (memory); want ErrSettled", i, gerr, werr)
			}
			gerr, werr = nil, nil
			dups++
		}
		if gerr != nil || werr != nil {
			t.Fatalf("step %d: miniredis error %v, memory error %v", i, gerr, werr)
		}
		if got != want {
			t.Fatalf("step %d (key %s, n %d, limits %v): miniredis %+v, memory %+v", i, key, n, limitSets[li], got, want)
		}
		// Every step ends with a peek on both: what settlements did shows.
		got, gerr = rule.redis.Peek(ctx, key)
		want, werr = rule.memory.Peek(ctx, key)
		if gerr != nil || werr != nil || got != want {
			t.Fatalf("step %d: Peek(%s) = %+v, %v (miniredis), %+v, %v (memory)", i, key, got, gerr, want, werr)
		}
		if !got.Allowed {
			denied++
		}
	}
	if settles < steps/10 || dups < steps/20 {
		t.Fatalf("%d settlements, %d duplicates: the sequence does not reach the paths it is meant to", settles, dups)
	}
	t.Logf("%d steps identical: %d reservations, %d settlements, %d duplicated settlements, %d peeks denied", steps, reserved, settles, dups, denied)
}
