package core_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// TestClusterShadow: on a Redis Cluster, a decision with shadow limits is
// one script call whose keys share the key's slot (no CROSSSLOT), batched
// per hash tag with other keys' decisions, for keys of every shape.
func TestClusterShadow(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t)
	rdb := c.Client(t)
	warmClient(t, rdb)
	lim, health := newTopoLimiter(t, rdb, core.WithTimeout(time.Second))
	r, err := lim.Prepare(core.PerMinute(3))
	if err == nil {
		r, err = r.WithShadowLimits(core.PerMinute(1).WithName("lower"), core.PerMinute(2))
	}
	if err != nil {
		t.Fatal(err)
	}
	keys := adversarialKeys()
	for i := range 500 {
		keys = append(keys, fmt.Sprintf("user:%d", i))
	}
	ctx := context.Background()
	forEachKey(t, keys, func(_ int, key string) error {
		for i := range 3 {
			res, err := r.Allow(ctx, key)
			if err != nil || !res.Allowed || res.Degraded || res.Shadow.Len() != 2 {
				return fmt.Errorf("Allow(%.40q) #%d = %+v, %v; want admitted by Redis, two shadow limits decided", key, i+1, res, err)
			}
			if got, want := fmt.Sprint(res.Shadow.Denied(0), res.Shadow.Denied(1)), fmt.Sprint(i >= 1, i >= 2); got != want {
				return fmt.Errorf("Allow(%.40q) #%d: shadow limits would deny %s, want %s", key, i+1, got, want)
			}
		}
		return nil
	})
	if n := health.storeErrs.Load(); n != 0 {
		t.Errorf("%d store errors, want none: %s", n, health)
	}
}
