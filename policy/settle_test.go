package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestMoved: the fields after a settlement are the decision's, with the
// deciding limit's bucket moved by the difference, within [0, Burst] and
// never a negative reset.
func TestMoved(t *testing.T) {
	l := core.PerMinute(6) // one event every 10 s
	for _, tc := range []struct {
		name          string
		remaining     int
		reset         time.Duration
		delta         int64
		wantRemaining int
		wantReset     time.Duration
	}{
		{"refund one", 3, 30 * time.Second, -1, 4, 20 * time.Second},
		{"refund to full", 5, 10 * time.Second, -1, 6, 0},
		{"refund beyond full", 5, 10 * time.Second, -4, 6, 0},
		{"charge two", 3, 30 * time.Second, 2, 1, 50 * time.Second},
		{"charge into debt", 1, 50 * time.Second, 4, 0, 90 * time.Second},
		{"nothing", 2, 40 * time.Second, 0, 2, 40 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := moved(core.Result{Allowed: true, Limit: l, Remaining: tc.remaining, ResetAfter: tc.reset}, tc.delta)
			if got.Remaining != tc.wantRemaining || got.ResetAfter != tc.wantReset || !got.Allowed || got.Limit != l {
				t.Errorf("moved = %+v, want Remaining %d, ResetAfter %v, the rest unchanged", got, tc.wantRemaining, tc.wantReset)
			}
		})
	}
}

// TestSettleOptions: the options' misuses fail the constructor or report
// false, never a silent charge.
func TestSettleOptions(t *testing.T) {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	charge := WithChargeIf[req, struct{}](func(int) bool { return true })
	if _, _, err := New(lim, core.PerMinute(5), keyfunc.Static("k"), self, charge, WithWait[req, struct{}](time.Second)); !errors.Is(err, errSettleWait) {
		t.Errorf("WithChargeIf with WithWait: New = %v, want errSettleWait", err)
	}
	if _, _, err := New(lim, core.PerMinute(5), keyfunc.Static("k"), self, WithFinalCost[req, struct{}](nil), WithWait[req, struct{}](time.Second)); !errors.Is(err, errSettleWait) {
		t.Errorf("WithFinalCost with WithWait: New = %v, want errSettleWait", err)
	}
	if SetCost(context.Background(), 3) {
		t.Error("SetCost on a context no middleware made reported true")
	}

	p := newTestPolicy(t, core.PerMinute(5), keyfunc.Static("k"), WithFinalCost[req, struct{}](nil))
	v := p.Decide(context.Background(), fakeReq{})
	ctx := v.Context(context.Background())
	if !v.Settles() || v.AtStatus() || SetCost(ctx, -1) || !SetCost(ctx, 2) {
		t.Fatalf("Settles %v, AtStatus %v, SetCost: want true, false, a negative cost refused and 2 recorded", v.Settles(), v.AtStatus())
	}
	if !v.Settle(fakeReq{}, Response{Status: 200}) || v.Result.Remaining != 3 {
		t.Errorf("Settle with a cost of 2 recorded: Remaining %d, want 3", v.Result.Remaining)
	}
	if v.Settle(fakeReq{}, Response{Status: 200}) {
		t.Error("a second Settle reported that it settled")
	}
	if v := p.Decide(context.Background(), fakeReq{}); v.Result.Remaining != 2 {
		t.Errorf("the next request: Remaining %d, want 2 (5 - 2 - 1)", v.Result.Remaining)
	}

	plain := newTestPolicy(t, core.PerMinute(5), keyfunc.Static("k"))
	v = plain.Decide(context.Background(), fakeReq{})
	if v.Settles() || v.Settle(fakeReq{}, Response{Status: 500}) || v.Context(ctx) != ctx {
		t.Error("a policy that charges before the handler settles")
	}
}

// TestSettleOnRedis: on a real Redis, failed logins are charged and the
// others refunded; when Redis is down at settlement the estimate stays
// charged and the failure is logged once.
func TestSettleOnRedis(t *testing.T) {
	ctx := context.Background()
	p, proxy, _, log := redisPolicy(t, core.PerMinute(2), keyfunc.Static("login"), nil,
		WithChargeIf[req, struct{}](func(s int) bool { return s == 401 }))
	settle := func(status int) Verdict {
		t.Helper()
		v := p.Decide(ctx, fakeReq{})
		if v.Action == Continue {
			v.Settle(fakeReq{}, Response{Status: status})
			v.Done()
		}
		return v
	}
	for i := range 5 {
		if v := settle(200); v.Action != Continue || v.Result.Remaining != 2 {
			t.Fatalf("success %d: %v, Remaining %d; want Continue, 2 (refunded)", i+1, v.Action, v.Result.Remaining)
		}
	}
	if v := settle(401); v.Action != Continue || v.Result.Remaining != 1 {
		t.Fatalf("a failure: %v, Remaining %d; want Continue, 1", v.Action, v.Result.Remaining)
	}
	v := p.Decide(ctx, fakeReq{})
	if err := proxy.SetDown(true); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if v.Settle(fakeReq{}, Response{Status: 200}) {
			t.Error("Settle with Redis down reported that it settled")
		}
	}
	if err := proxy.SetDown(false); err != nil {
		t.Fatal(err)
	}
	if v := p.Decide(ctx, fakeReq{}); v.Action != Deny {
		t.Errorf("after a refund that could not reach Redis: %v, want Deny (the estimate stands)", v.Action)
	}
	var said []string
	log.mu.Lock()
	for _, l := range log.got {
		if strings.Contains(l, "charged by its response") {
			said = append(said, l)
		}
	}
	log.mu.Unlock()
	if len(said) != 1 {
		t.Errorf("logged %q, want one line about the settlement", said)
	}
}

// TestSettleCapped: a request the concurrency cap refuses does not run; it
// is settled at once as the 429 it gets, so a login middleware that counts
// failures does not count it.
func TestSettleCapped(t *testing.T) {
	ctx := context.Background()
	p := newTestPolicy(t, core.PerMinute(3), keyfunc.Static("k"),
		WithChargeIf[req, struct{}](func(s int) bool { return s == 401 }),
		WithConcurrency[req, struct{}](core.ConcurrencyLimit{Max: 1}))
	held := p.Decide(ctx, fakeReq{})
	if held.Action != Continue {
		t.Fatalf("first: %v, want Continue", held.Action)
	}
	for range 2 {
		if v := p.Decide(ctx, fakeReq{}); v.Action != Deny || v.Settles() {
			t.Fatalf("while the first runs: %v, Settles %v; want a Deny with nothing left to settle", v.Action, v.Settles())
		}
	}
	held.Settle(fakeReq{}, Response{Status: 401})
	held.Done()
	v := p.Decide(ctx, fakeReq{})
	defer v.Done()
	if v.Action != Continue || v.Result.Remaining != 1 {
		t.Errorf("after the first failed: %v, Remaining %d; want Continue, 1 (3 - the failure - this one)", v.Action, v.Result.Remaining)
	}
}
