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

// endWait is an Observer that cancels the context of the call it is told
// of, so that a Wait returns as soon as it has reserved, with the context's
// error and its Result, instead of sleeping for the reservation.
type endWait struct{ cancel context.CancelFunc }

func (e *endWait) ObserveDecision(core.Result, core.Source) {
	if e.cancel != nil {
		e.cancel()
	}
}

func (*endWait) ObserveStore(core.StoreCall)       {}
func (*endWait) ObserveDegraded(core.StoreOutage)  {}
func (*endWait) ObserveRecovered(core.StoreOutage) {}

// TestMiniredisMatchesMemory drives a limiter on miniredis and one in
// memory through the same random calls at the same virtual instants, and
// requires identical results, a reservation's Wait included. The memory
// limiter decides with core's Go model, which core's differential test
// holds to the script on a real Redis; so this shows the script runs the
// same on gopher-lua, which the demos and many users' tests rely on.
func TestMiniredisMatchesMemory(t *testing.T) {
	ender := &endWait{}
	s := newTwoStores(t, core.WithPenalty(1500*time.Millisecond), core.WithLogger(slog.New(slog.DiscardHandler)), core.WithObserver(ender))
	onRedis, inMemory := s.onRedis, s.inMemory

	limitSets := [][]core.Limit{
		{core.PerSecond(5)},
		{core.PerSecond(10).WithBurst(3), core.PerMinute(40)},
		{{Name: "odd", Rate: 7, Period: 1300 * time.Millisecond, Burst: 2}},
	}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	steps := stepsOf(3000)
	var denied, locked, waited int
	// wait reserves without sleeping: ender cancels the context once the
	// tokens are reserved. The reservation stands either way.
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
	for i := range steps {
		if r.IntN(3) == 0 {
			d := time.Duration(r.IntN(400_000)) * time.Microsecond
			s.advance(d)
		}
		limits := limitSets[r.IntN(len(limitSets))]
		key := []string{"a", "b", "c"}[r.IntN(3)]
		most := 3 // a cost above a limit's burst is refused as invalid
		for _, l := range limits {
			most = min(most, l.Burst)
		}
		n := 1 + r.IntN(most)
		var got, want core.Result
		var gerr, werr error
		switch op := r.IntN(10); {
		case op < 6:
			got, gerr = onRedis.AllowN(ctx, key, n, limits...)
			want, werr = inMemory.AllowN(ctx, key, n, limits...)
		case op < 7:
			got, gerr = wait(onRedis, key, n, limits)
			want, werr = wait(inMemory, key, n, limits)
			if got.Wait > 0 {
				waited++
			}
		case op < 9:
			got, gerr = onRedis.Peek(ctx, key, limits...)
			want, werr = inMemory.Peek(ctx, key, limits...)
		default:
			gerr = onRedis.Reset(ctx, key, limits...)
			werr = inMemory.Reset(ctx, key, limits...)
		}
		if gerr != nil || werr != nil {
			t.Fatalf("step %d: miniredis error %v, memory error %v", i, gerr, werr)
		}
		if got != want {
			t.Fatalf("step %d (key %s, n %d, limits %v): miniredis %+v, memory %+v", i, key, n, limits, got, want)
		}
		if !got.Allowed {
			denied++
		}
		if got.Locked {
			locked++
		}
	}
	if denied < steps/10 || locked == 0 || waited == 0 {
		t.Fatalf("%d of %d results denied, %d locked, %d waited: the sequence does not reach the paths it is meant to", denied, steps, locked, waited)
	}
	t.Logf("%d results identical, %d denied, %d under the penalty lock, %d waited", steps, denied, locked, waited)
}
