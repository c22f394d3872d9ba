package sluiceotel

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// TestShadow: each decision of a shadow limit is recorded on
// sluice.rate_limiting.shadow_requests by the result it would have had,
// with mode "shadow", and not on sluice.rate_limiting.requests.
func TestShadow(t *testing.T) {
	obs, reader := newTest(t)
	now := time.Unix(1_800_000_000, 0)
	lim, err := core.NewMemory(core.WithObserver(obs), core.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	r, err := lim.Prepare(core.PerMinute(100).WithName("today"))
	if err == nil {
		r, err = r.WithShadowLimits(core.PerMinute(2).WithName("lower"), core.PerMinute(3))
	}
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if res, err := r.Allow(context.Background(), "tenant:acme"); err != nil || !res.Allowed {
			t.Fatalf("%+v, %v", res, err)
		}
	}
	_, ps := collect(t, reader)
	const shadow = "sluice.rate_limiting.shadow_requests"
	for _, tc := range []struct {
		instrument, attrs string
		want              float64
	}{
		{shadow, "sluice.rate_limiting.mode=shadow,sluice.rate_limiting.policy=lower,sluice.rate_limiting.result=allowed,sluice.rate_limiting.source=store", 2},
		{shadow, "sluice.rate_limiting.mode=shadow,sluice.rate_limiting.policy=lower,sluice.rate_limiting.result=denied,sluice.rate_limiting.source=store", 2},
		{shadow, "sluice.rate_limiting.mode=shadow,sluice.rate_limiting.policy=unnamed,sluice.rate_limiting.result=allowed,sluice.rate_limiting.source=store", 3},
		{shadow, "sluice.rate_limiting.mode=shadow,sluice.rate_limiting.policy=unnamed,sluice.rate_limiting.result=denied,sluice.rate_limiting.source=store", 1},
		{"sluice.rate_limiting.requests", "sluice.rate_limiting.dry_run=false,sluice.rate_limiting.policy=today,sluice.rate_limiting.result=allowed,sluice.rate_limiting.source=store", 4},
	} {
		if got, ok := find(ps, tc.instrument, tc.attrs); !ok || got != tc.want {
			t.Errorf("%s{%s} = %v (found %v), want %v", tc.instrument, tc.attrs, got, ok, tc.want)
		}
	}
	n := 0
	for _, p := range ps {
		if p.name == shadow {
			n++
		}
	}
	if n != 4 {
		t.Errorf("%d shadow series, want 4: %v", n, ps)
	}
}
