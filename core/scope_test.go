package core_test

import (
	"context"
	"fmt"
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
