package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
)

// throttledGCRA adapts throttled's GCRA on its go-redis v9 store: the bucket
// is read (TIME and GET in one pipeline) and written back with a
// compare-and-swap script, retried up to ten times when another caller
// changed it in between; the tenth failure is an error.
type throttledGCRA struct {
	l *throttled.GCRARateLimiterCtx
}

func (t *throttledGCRA) Allow(ctx context.Context, key string) (bool, error) {
	limited, _, err := t.l.RateLimitCtx(ctx, key, 1)
	if err != nil {
		return false, err
	}
	return !limited, nil
}

func newThrottled(env Env, lim Limit) (*Built, error) {
	// throttled's rate is an interval between events, in whole nanoseconds,
	// and it admits MaxBurst+1 requests at once.
	if int64(lim.Period)%int64(lim.Rate) != 0 {
		return nil, fmt.Errorf("an interval of %s/%d is not a whole number of nanoseconds", lim.Period, lim.Rate)
	}
	tr := new(Traffic)
	rdb := NewClient(env, tr)
	store, err := goredisstore.NewCtx(rdb, "throttled:")
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	quota := throttled.RateQuota{MaxRate: throttled.PerDuration(lim.Rate, lim.Period), MaxBurst: lim.Burst - 1}
	l, err := throttled.NewGCRARateLimiterCtx(store, quota)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	note := fmt.Sprintf("one event per %s, MaxBurst %d", time.Duration(int64(lim.Period)/int64(lim.Rate)), lim.Burst-1)
	return builtOnClient(&throttledGCRA{l: l}, rdb, tr, note), nil
}
