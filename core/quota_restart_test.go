package core

import (
	"context"
	"os"
	"testing"
)

// TestCalendarQuotaAcrossRestart is issue #47's item 4 as a test: three
// replicas spend a monthly quota of 30 (10 each) on a private
// redis-server, which is killed and restarted without persistence; the
// same three replicas (none died) then try 30 more each. The quota must
// hold: at most 30 in the month, so none after the restart. It fails
// today (all 30 again: the fleet hands out a new month), for a key and
// for a path's org level, and runs only when asked until the re-assertion
// that item 4 describes is built:
//
//	SLUICE_QUOTA_RESTART=1 go test ./core -run TestCalendarQuotaAcrossRestart -v -count=1
func TestCalendarQuotaAcrossRestart(t *testing.T) {
	if os.Getenv("SLUICE_QUOTA_RESTART") != "1" {
		t.Skip("fails until issue #47's item 4 is built; run it with SLUICE_QUOTA_RESTART=1")
	}
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
			pr, err := lim.PreparePath("q", Level{"org", []Limit{quota}}, Level{"user", []Limit{PerMinute(1000)}})
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
