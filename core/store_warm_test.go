package core

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// TestWarmUpHolds: Ready's warm-up holds every connection of the pool
// until all are open, so they are distinct; the background warm-up, which
// runs beside traffic, never has more than half of the pool in use, so a
// call (the limiter's probe, go-redis's slot-map reload) finds a
// connection while handshakes are slow. With Redis 200 ms away each
// handshake takes that long, and the pool's use is sampled meanwhile.
func TestWarmUpHolds(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	proxy.SetDelay(200 * time.Millisecond)
	const poolSize = 8
	for _, tc := range []struct {
		name    string
		warm    func(ctx context.Context, c *redis.Client, n int)
		maxUsed uint32 // at most this many connections in use at once
		minUsed uint32 // at least this many at some point
	}{
		{"Ready", func(ctx context.Context, c *redis.Client, n int) { _ = redisstore.WarmPool(ctx, c, n) }, poolSize, poolSize},
		{"background", redisstore.TopUpPool, poolSize / 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: poolSize, ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan struct{})
			go func() {
				defer close(done)
				tc.warm(ctx, c, 13)
			}()
			var most uint32
			for running := true; running; {
				select {
				case <-done:
					running = false
				case <-time.After(5 * time.Millisecond):
				}
				st := c.PoolStats()
				most = max(most, st.TotalConns-st.IdleConns)
			}
			st := c.PoolStats()
			t.Logf("pool of %d: at most %d connections in use during the warm-up; %d open after it", poolSize, most, st.TotalConns)
			if most > tc.maxUsed {
				t.Errorf("the warm-up had %d connections of the pool in use at once, want at most %d", most, tc.maxUsed)
			}
			if most < tc.minUsed {
				t.Errorf("the warm-up had at most %d connections in use at once, want at least %d (did it open any?)", most, tc.minUsed)
			}
		})
	}
}
