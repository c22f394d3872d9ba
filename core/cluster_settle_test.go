package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// TestClusterSettle reserves and settles on a real Redis Cluster, on
// adversarial keys and many plain ones: the settle script's two keys (the
// bucket and its marker) always share a slot (a CROSSSLOT error would
// fail the call), every refund lands on the bucket, a duplicated
// settlement changes nothing, and each marker is on the master that holds
// its bucket's slot.
func TestClusterSettle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t)
	rdb := c.Client(t)
	warmClient(t, rdb)
	lim, health := newTopoLimiter(t, rdb, core.WithTimeout(time.Second))
	rule, err := lim.Prepare(core.PerMinute(10))
	if err != nil {
		t.Fatal(err)
	}
	keys := adversarialKeys()
	for i := range 500 {
		keys = append(keys, fmt.Sprintf("user:%d", i))
	}
	ctx := context.Background()
	forEachKey(t, keys, func(_ int, key string) error {
		rv, err := rule.Reserve(ctx, key, 6)
		if err != nil || !rv.Result.Allowed || rv.Result.Degraded {
			return fmt.Errorf("Reserve(%.40q) = %+v, %v; want admitted by Redis", key, rv, err)
		}
		if err := rv.Settle(ctx, 2); err != nil {
			return fmt.Errorf("Settle(%.40q) = %v", key, err)
		}
		if err := rv.Settle(ctx, 2); !errors.Is(err, core.ErrSettled) {
			return fmt.Errorf("second Settle(%.40q) = %v, want ErrSettled", key, err)
		}
		res, err := rule.Peek(ctx, key)
		if err != nil || res.Remaining != 8 {
			return fmt.Errorf("Peek(%.40q) = %+v, %v; want 8 left (6 reserved, 4 refunded)", key, res, err)
		}
		return nil
	})
	if n := health.storeErrs.Load(); n != 0 {
		t.Errorf("%d store errors, want none: %s", n, health)
	}
	markers := 0
	for _, m := range c.Masters() {
		owned := map[int]bool{}
		for _, s := range c.SlotsOf(m) {
			owned[s] = true
		}
		for _, name := range scanMaster(t, m, storePrefix) {
			if !strings.Contains(name, "~") {
				continue
			}
			markers++
			tag, ok := hashTag(name)
			if !ok || !owned[redistest.Slot(tag)] {
				t.Errorf("marker %.60q is on %s, which does not serve its tag's slot", name, m)
			}
		}
	}
	if markers < len(keys) {
		t.Errorf("found %d markers, want at least one per key (%d)", markers, len(keys))
	}
	t.Logf("%d keys reserved, settled and settled again on a 3-master Cluster; %d markers, each in its bucket's slot", len(keys), markers)
}
