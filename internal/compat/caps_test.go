package compat

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
)

// TestMiniredisCapHoldsAcrossReplicas: a concurrency cap of 10 shared by
// three replicas on miniredis (every example's default) holds 10 slots in
// all, decided by the store, none by a replica's fallback. miniredis lacks
// LASTSAVE and INFO's server fields, which the cap scripts read to notice a
// restart; they then tell a loss of data by an epoch key instead. Before,
// every acquisition failed there and fell back: the cap became 10 per
// replica while Ready said all was well.
func TestMiniredisCapHoldsAcrossReplicas(t *testing.T) {
	m := miniredis.RunT(t)
	ctx := context.Background()
	var caps []*core.Concurrency
	for range 3 {
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		lim, err := core.New(rdb, core.WithTimeout(5*time.Second), core.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lim.Close() })
		if err := lim.Ready(ctx); err != nil {
			t.Fatalf("Ready on miniredis: %v", err)
		}
		c, err := lim.PrepareConcurrency(core.ConcurrencyLimit{Name: "jobs", Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		caps = append(caps, c)
	}
	var held []*core.Lease
	for _, c := range caps {
		for range 10 {
			ls, err := c.Acquire(ctx, "tenant:a")
			if err != nil {
				t.Fatal(err)
			}
			if ls.Degraded {
				t.Fatalf("an acquisition on miniredis was decided by the fallback: %+v", ls)
			}
			if ls.Acquired {
				held = append(held, ls)
			}
		}
	}
	if len(held) != 10 {
		t.Errorf("three replicas took %d slots of a cap of 10, want 10", len(held))
	}
	for _, ls := range held {
		if err := ls.Release(ctx); err != nil {
			t.Errorf("release: %v", err)
		}
	}
	if ls, err := caps[2].Acquire(ctx, "tenant:a"); err != nil || !ls.Acquired || ls.Degraded {
		t.Errorf("after the releases: %+v, %v; want a slot from the store", ls, err)
	}
}
