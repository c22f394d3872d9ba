package core_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// TestPrepareScoped: rules of different scopes keep apart buckets for the
// same key and limits, rules of one scope share them, and the empty scope
// is the limits' own buckets, on Redis and in memory.
func TestPrepareScoped(t *testing.T) {
	onRedis := func(t *testing.T) *core.Limiter {
		rdb := redistest.NewClient(t, redistest.Addr(t))
		lim, err := core.New(rdb, core.WithPrefix(fmt.Sprintf("scopetest:%d:", time.Now().UnixNano())), core.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	inMemory := func(t *testing.T) *core.Limiter {
		lim, err := core.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	for name, newLimiter := range map[string]func(*testing.T) *core.Limiter{"redis": onRedis, "memory": inMemory} {
		t.Run(name, func(t *testing.T) {
			lim := newLimiter(t)
			t.Cleanup(func() { _ = lim.Close() })
			ctx := context.Background()
			limit := core.PerMinute(1)
			rule := func(scope string) *core.Rule {
				r, err := lim.PrepareScoped(scope, limit)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			steps := []struct {
				scope string
				want  bool
			}{
				{"search", true},
				{"search", false}, // one scope, one bucket
				{"export", true},  // another scope, another bucket
				{"", true},        // the unscoped bucket is a third
			}
			for i, st := range steps {
				res, err := rule(st.scope).Allow(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed != st.want {
					t.Errorf("step %d, scope %q: allowed %v, want %v", i, st.scope, res.Allowed, st.want)
				}
			}
			if res, err := lim.Allow(ctx, "k", limit); err != nil || res.Allowed {
				t.Errorf("Limiter.Allow after the empty scope's rule: %+v, %v; want a denial from the same bucket", res, err)
			}
		})
	}
}

// recorder is an Observer that keeps the results it is told about.
type recorder struct {
	mu      sync.Mutex
	results []core.Result
}

func (r *recorder) ObserveDecision(res core.Result, _ core.Source) {
	r.mu.Lock()
	r.results = append(r.results, res)
	r.mu.Unlock()
}
func (*recorder) ObserveStore(core.StoreCall)       {}
func (*recorder) ObserveDegraded(core.StoreOutage)  {}
func (*recorder) ObserveRecovered(core.StoreOutage) {}

// TestRuleDryRun: a dry-run rule draws on the same buckets as its rule,
// and its results, as returned and as observed, are marked DryRun; the
// rule it came from is unchanged.
func TestRuleDryRun(t *testing.T) {
	obs := &recorder{}
	lim, err := core.NewMemory(core.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rule, err := lim.PrepareScoped("checkout", core.PerMinute(1))
	if err != nil {
		t.Fatal(err)
	}
	shadow, err := rule.DryRun()
	if err != nil {
		t.Fatal(err)
	}
	first, _ := shadow.Allow(ctx, "k")
	second, _ := rule.Allow(ctx, "k")
	third, _ := shadow.Allow(ctx, "k")
	if !first.Allowed || !first.DryRun || second.Allowed || second.DryRun || third.Allowed || !third.DryRun {
		t.Errorf("dry run, rule, dry run: %+v, %+v, %+v; want allowed+dry, denied, denied+dry from one bucket", first, second, third)
	}
	if len(obs.results) != 3 || !obs.results[0].DryRun || obs.results[1].DryRun || !obs.results[2].DryRun {
		t.Errorf("observed %+v; want the dry-run results marked", obs.results)
	}
}
