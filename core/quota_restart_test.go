package core

import (
	"context"
	"testing"
	"time"
)

// TestCalendarQuotaAcrossRestart is issue #47's item 4 as a test: three
// replicas spend a monthly quota of 30 (10 each) on a private
// redis-server, which is killed and restarted without persistence; the
// same three replicas (none died) then try 30 more each. The quota must
// hold: at most 30 in the month, so none after the restart, for a key and
// for a path's org level. Each replica re-asserts what it admitted in the
// month on its first call after the loss, while the tag's grace period
// refuses every call (see core/internal/redisstore/quota.lua); before
// that was built, the fleet was handed a new month (30 after).
func TestCalendarQuotaAcrossRestart(t *testing.T) {
	quota := PerCalendarMonth(30, "UTC")
	kinds := []struct {
		name  string
		allow func(t *testing.T, lim *Limiter) func() (Result, error)
	}{
		{"key", func(t *testing.T, lim *Limiter) func() (Result, error) {
			rule, err := lim.Prepare(quota)
			if err != nil {
				t.Fatal(err)
			}
			return func() (Result, error) { return rule.Allow(context.Background(), "org:acme") }
		}},
		{"path", func(t *testing.T, lim *Limiter) func() (Result, error) {
			pr, err := lim.PreparePath("q", Level{Name: "org", Limits: []Limit{quota}}, Level{Name: "user", Limits: []Limit{PerMinute(1000)}})
			if err != nil {
				t.Fatal(err)
			}
			return func() (Result, error) { return pr.Allow(context.Background(), "acme", "ann") }
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			env, mk := forgetSetup(t)
			var allows []func() (Result, error)
			var lims []*Limiter
			for range 3 {
				lim := mk(WithDenyCache(false))
				lims = append(lims, lim)
				allows = append(allows, k.allow(t, lim))
			}
			before := 0
			for _, allow := range allows {
				for range 10 {
					if r, err := allow(); err == nil && r.Allowed && !r.Degraded {
						before++
					}
				}
			}
			env.srv.Kill()
			env.srv.Restart()
			for _, lim := range lims {
				waitRedis(t, lim, quota)
			}
			after := 0
			for range 30 {
				for _, allow := range allows {
					if r, err := allow(); err == nil && r.Allowed && !r.Degraded {
						after++
					}
				}
			}
			t.Logf("%d admitted before the restart, %d after", before, after)
			if before != 30 || after != 0 {
				t.Errorf("a monthly quota of 30 on three replicas: %d before a restart and %d after, want 30 and 0", before, after)
			}
		})
	}
}

// TestQuotaReassertBound holds the bound of item 4 with uneven traffic
// and with a replica that died: after a restart without persistence a
// monthly quota admits at most what the replicas that did not re-assert
// had admitted, and the grace period refuses only stepped calls on tags a
// replica knew. It waits for the grace period's end on Redis's clock (2
// seconds), which is what it tests.
func TestQuotaReassertBound(t *testing.T) {
	quota := PerCalendarMonth(30, "UTC")
	ctx := context.Background()
	spend := func(t *testing.T, rule *Rule, n int) int {
		t.Helper()
		admitted := 0
		for range n {
			if r, err := rule.Allow(ctx, "org:acme"); err == nil && r.Allowed && !r.Degraded {
				admitted++
			}
		}
		return admitted
	}
	cases := []struct {
		name      string
		spent     []int // what each replica admits before the restart
		alive     []bool
		wantAfter int // after the grace period: the quota less what the living re-asserted
	}{
		{"uneven traffic, all alive", []int{20, 10}, []bool{true, true}, 0},
		{"one of three died", []int{10, 10, 10}, []bool{false, true, true}, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, mk := forgetSetup(t)
			var rules []*Rule
			for i := range tc.spent {
				rule, err := mk(WithDenyCache(false)).Prepare(quota)
				if err != nil {
					t.Fatal(err)
				}
				rules = append(rules, rule)
				if got := spend(t, rule, tc.spent[i]); got != tc.spent[i] {
					t.Fatalf("replica %d admitted %d before the restart, want %d", i, got, tc.spent[i])
				}
			}
			env.srv.Kill()
			env.srv.Restart()
			var graceEnd time.Time // from the first refusal's RetryAfter
			for i, rule := range rules {
				if !tc.alive[i] {
					continue
				}
				waitRedis(t, rule.lim, quota)
				// Uneven: each living replica calls 30 times in turn.
				for range 30 {
					r, err := rule.Allow(ctx, "org:acme")
					if err != nil || r.Degraded {
						t.Fatalf("replica %d after the restart: %+v, %v", i, r, err)
					}
					if r.Allowed {
						t.Fatalf("replica %d admitted in the grace period: %+v", i, r)
					}
					if graceEnd.IsZero() {
						if r.RetryAfter <= 0 || r.RetryAfter > 2*time.Second {
							t.Fatalf("the first refusal's RetryAfter is %v, want the grace period's end, within 2s", r.RetryAfter)
						}
						graceEnd = time.Now().Add(r.RetryAfter)
					}
				}
			}
			// A tag no replica knew is not refused: a newcomer's first call
			// on a key of its own is admitted at once.
			newcomer, err := mk(WithDenyCache(false)).Prepare(quota)
			if err != nil {
				t.Fatal(err)
			}
			if r, err := newcomer.Allow(ctx, "org:other"); err != nil || !r.Allowed {
				t.Errorf("a newcomer on a tag nobody knew: %+v, %v; want admitted", r, err)
			}
			time.Sleep(time.Until(graceEnd)) // the grace period, on Redis's clock
			after := 0
			for i, rule := range rules {
				if tc.alive[i] {
					after += spend(t, rule, 30)
				}
			}
			t.Logf("%d admitted after the restart; spent %v before, alive %v", after, tc.spent, tc.alive)
			if after != tc.wantAfter {
				t.Errorf("admitted %d after the restart and the grace period, want %d", after, tc.wantAfter)
			}
		})
	}
}
