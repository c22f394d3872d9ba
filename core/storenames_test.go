package core

import (
	"testing"

	"github.com/sluicehq/sluice/core/internal/redisstore"
)

// TestStoreNamesMatchCore holds the Redis store's own names for what it
// reports (operation kinds, error reasons) to core's exported ones, which
// users' metrics and alerts read: the store is below core and cannot use
// them.
func TestStoreNamesMatchCore(t *testing.T) {
	for _, c := range []struct{ core, store string }{
		{OpDecide, redisstore.OpDecide}, {OpPeek, redisstore.OpPeek}, {OpSettle, redisstore.OpSettle},
		{OpAcquire, redisstore.OpAcquire}, {OpRelease, redisstore.OpRelease}, {OpRenew, redisstore.OpRenew},
		{OpReset, redisstore.OpReset}, {OpLock, redisstore.OpLock}, {OpHeartbeat, redisstore.OpHeartbeat}, {OpPath, redisstore.OpPath},
		{OpOverrides, redisstore.OpOverrides}, {OpLease, redisstore.OpLease}, {OpLeaseReturn, redisstore.OpLeaseReturn}, {OpTop, redisstore.OpTop},
		{OpThreshold, redisstore.OpThreshold},
		{ReasonTimeout, redisstore.ReasonTimeout}, {ReasonRefused, redisstore.ReasonRefused},
		{ReasonConnection, redisstore.ReasonConnection}, {ReasonLoading, redisstore.ReasonLoading},
		{ReasonReadOnly, redisstore.ReasonReadOnly}, {ReasonClusterDown, redisstore.ReasonClusterDown},
		{ReasonOOM, redisstore.ReasonOOM}, {ReasonScript, redisstore.ReasonScript}, {ReasonAuth, redisstore.ReasonAuth},
		{ReasonNoPerm, redisstore.ReasonNoPerm}, {ReasonOther, redisstore.ReasonOther}, {ReasonPaused, redisstore.ReasonPaused},
	} {
		if c.core != c.store {
			t.Errorf("core says %q where the Redis store says %q", c.core, c.store)
		}
	}
}
