package core_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// TestRuleWithPenalty: a rule's penalty replaces the limiter's, in both
// directions, on Redis and in memory; the lock is the key's, so a rule of
// the same scope and limits without the penalty is denied while it holds.
func TestRuleWithPenalty(t *testing.T) {
	onRedis := func(t *testing.T, opts ...core.Option) *core.Limiter {
		rdb := redistest.NewClient(t, redistest.Addr(t))
		opts = append(opts, core.WithPrefix(fmt.Sprintf("penaltytest:%d:", time.Now().UnixNano())), core.WithTimeout(5*time.Second))
		lim, err := core.New(rdb, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	inMemory := func(t *testing.T, opts ...core.Option) *core.Limiter {
		lim, err := core.NewMemory(opts...)
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	type step struct {
		rule   string // "login" (with the rule's penalty) or "plain" (same scope and limit, none)
		allow  bool
		locked bool
	}
	for name, newLimiter := range map[string]func(*testing.T, ...core.Option) *core.Limiter{"redis": onRedis, "memory": inMemory} {
		for _, tc := range []struct {
			name   string
			engine time.Duration // the limiter's WithPenalty
			rule   time.Duration // the login rule's WithPenalty
			steps  []step
		}{
			{"a lock on one rule of an engine without one", 0, time.Hour, []step{
				{"plain", true, false}, {"plain", false, false}, // the plain rule's denial locks nothing
				{"login", false, true}, // the login rule's does
				{"plain", false, true}, // and the lock is the key's
			}},
			{"no lock on one rule of an engine with one", time.Hour, 0, []step{
				{"login", true, false}, {"login", false, false},
				{"plain", false, true},
				{"login", false, true},
			}},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				lim := newLimiter(t, core.WithPenalty(tc.engine))
				t.Cleanup(func() { _ = lim.Close() })
				plain, err := lim.PrepareScoped("login", core.PerHour(1))
				if err != nil {
					t.Fatal(err)
				}
				login, err := plain.WithPenalty(tc.rule)
				if err != nil {
					t.Fatal(err)
				}
				rules := map[string]*core.Rule{"login": login, "plain": plain}
				for i, st := range tc.steps {
					res, err := rules[st.rule].Allow(context.Background(), "user:ada")
					if err != nil {
						t.Fatalf("step %d: %s.Allow: %v", i+1, st.rule, err)
					}
					if res.Allowed != st.allow || res.Locked != st.locked {
						t.Errorf("step %d: %s.Allow = allowed %v locked %v, want %v %v", i+1, st.rule, res.Allowed, res.Locked, st.allow, st.locked)
					}
					if st.locked && res.RetryAfter < 59*time.Minute {
						t.Errorf("step %d: %s.Allow: RetryAfter %s under a lock of an hour", i+1, st.rule, res.RetryAfter)
					}
				}
			})
		}
	}
}

func TestRuleWithPenaltyKeeps(t *testing.T) {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	r, err := lim.PrepareScoped("s", core.PerMinute(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{-time.Second, core.MaxPenalty + time.Second} {
		if _, err := r.WithPenalty(d); err == nil {
			t.Errorf("Rule.WithPenalty(%s): no error", d)
		}
	}
	// A dry-run rule keeps its penalty, and a penalty rule stays dry run.
	locking, err := r.WithPenalty(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	dry, err := locking.DryRun()
	if err != nil {
		t.Fatal(err)
	}
	dry2, err := dry.WithPenalty(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, rule := range []*core.Rule{dry, dry2} {
		key := fmt.Sprintf("k%p", rule)
		_, _ = rule.Allow(ctx, key)
		res, err := rule.Allow(ctx, key)
		if err != nil || !res.Locked || !res.DryRun {
			t.Errorf("second Allow on a dry-run rule with a penalty = %+v, %v; want locked and dry run", res, err)
		}
	}
}
