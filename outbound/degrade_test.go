package outbound

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// TestRedisDownSharesBudget: with Redis down, each of three replicas
// spends its share of an upstream's budget in its own memory (the
// limiter's local fallback, sized for three), so the fleet together keeps
// to the limit instead of three times it.
func TestRedisDownSharesBudget(t *testing.T) {
	redistest.QuietClientLogs()
	proxy := redistest.NewProxy(t, redistest.Addr(t))
	prefix := core.WithPrefix(fmt.Sprintf("outboundtest:down:%d:", time.Now().UnixNano()))
	limit := core.Limit{Rate: 1, Period: time.Hour, Burst: 30} // no refill within the test
	var budgets []*Budget
	for range 3 {
		lim, err := core.New(redistest.NewClient(t, proxy.Addr()), prefix, core.WithFallbackReplicas(3),
			core.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lim.Close() })
		b, err := New(lim, limit, WithFailFast(true), WithLeases(false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		budgets = append(budgets, b)
	}
	if err := proxy.SetDown(true); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	total := 0
	for i, b := range budgets {
		n := 0
		for ; n < 100; n++ {
			if err := b.Take(ctx, "host:api"); err != nil {
				if !errors.Is(err, ErrLimited) {
					t.Fatalf("replica %d: Take = %v, want a refusal", i, err)
				}
				break
			}
		}
		if n != 10 {
			t.Errorf("replica %d took %d calls with Redis down, want its share, 10", i, n)
		}
		total += n
	}
	t.Logf("the fleet took %d calls of a budget of %d with Redis down", total, limit.Burst)
}
