package bench

import "github.com/sluicehq/sluice/core"

// Peers returns every limiter under comparison, Redis-backed ones first.
func Peers() []Peer {
	return []Peer{
		{Name: "sluice", Module: "github.com/sluicehq/sluice", Redis: true, Fleet: true, New: newSluice()},
		{Name: "sluice/nobatch", Module: "github.com/sluicehq/sluice", Redis: true, Fleet: true, New: newSluice(core.WithBatching(0))},
		{Name: "sluice/nodeny", Module: "github.com/sluicehq/sluice", Redis: true, DenyOnly: true, New: newSluice(core.WithDenyCache(false))},
		{Name: "sluice/lease", Module: "github.com/sluicehq/sluice", Redis: true, Fleet: true, FleetOnly: true, New: newSluiceLease},
		{Name: "redis_rate", Module: "github.com/go-redis/redis_rate/v10", Redis: true, Fleet: true, New: newRedisRate},
		{Name: "ulule", Module: "github.com/ulule/limiter/v3", Redis: true, Fleet: true, New: newUlule},
		{Name: "go-zero", Module: "github.com/zeromicro/go-zero", Redis: true, New: newGoZero},
		{Name: "throttled", Module: "github.com/throttled/throttled/v2", Redis: true, Fleet: true, New: newThrottled},
		{Name: "floor", Module: "github.com/redis/go-redis/v9", Redis: true, Fleet: true, FleetOnly: true, New: newFloor},
		{Name: "sluice/memory", Module: "github.com/sluicehq/sluice", New: newSluiceMemory},
		{Name: "x/time/rate", Module: "golang.org/x/time", New: newXTime},
	}
}
