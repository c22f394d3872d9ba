package core_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
)

// TestWithClock: a memory limiter reads the clock it is given, so a frozen
// clock gives exact waits and a stepped one refills exactly; New refuses
// the option with an error that says why.
func TestWithClock(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	lim, err := core.NewMemory(core.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	ctx := context.Background()
	limit := core.PerMinute(2)
	steps := []struct {
		advance time.Duration
		allowed bool
		retry   time.Duration
	}{
		{0, true, 0},
		{0, true, 0},
		{0, false, 30 * time.Second},
		{29 * time.Second, false, time.Second},
		{time.Second, true, 0},
		{0, false, 30 * time.Second},
	}
	for i, st := range steps {
		now = now.Add(st.advance)
		res, err := lim.Allow(ctx, "k", limit)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != st.allowed || res.RetryAfter != st.retry {
			t.Errorf("step %d: allowed %v, retry after %v; want %v, %v", i, res.Allowed, res.RetryAfter, st.allowed, st.retry)
		}
	}

	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	if _, err := core.New(rdb, core.WithClock(time.Now)); err == nil || !strings.Contains(err.Error(), "WithClock applies to NewMemory only") {
		t.Errorf("New with WithClock: %v, want an error saying it applies to NewMemory only", err)
	}
}
