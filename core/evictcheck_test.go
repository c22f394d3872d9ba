package core

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/redistest"
)

// TestEvictionPolicyWarning: at its first answer from a node the limiter
// reads the node's eviction policy (INFO) and logs one warning, with
// the fix, when the policy can evict what it must keep; none otherwise.
func TestEvictionPolicyWarning(t *testing.T) {
	for _, tc := range []struct {
		policy string
		warn   bool
	}{
		{"volatile-ttl", true},
		{"allkeys-lru", true},
		{"volatile-random", true},
		{"volatile-lru", true},
		{"volatile-lfu", false},
		{"noeviction", false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", tc.policy)
			var logs syncBuffer
			lim := newRedisLimiter(t, srv.Addr(), WithPrefix("ev:"), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			ctx := context.Background()
			for range 20 {
				if _, err := lim.Allow(ctx, "k", PerSecond(10)); err != nil {
					t.Fatal(err)
				}
			}
			redisOf(lim).WaitBackground() // the read runs beside the decisions
			if err := lim.Close(); err != nil {
				t.Fatal(err)
			}
			out := logs.String()
			n := strings.Count(out, "maxmemory-policy can evict")
			switch {
			case tc.warn && (n != 1 || !strings.Contains(out, "maxmemory_policy="+tc.policy) || !strings.Contains(out, "set maxmemory-policy volatile-lfu")):
				t.Errorf("log = %q; want one warning naming %s and the fix", out, tc.policy)
			case !tc.warn && n != 0:
				t.Errorf("log = %q; want no warning for %s", out, tc.policy)
			}
		})
	}
}
