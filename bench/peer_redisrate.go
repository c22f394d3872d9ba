package bench

import (
	"context"

	"github.com/go-redis/redis_rate/v10"
)

// redisRate adapts go-redis/redis_rate: a GCRA in one Lua script, state in
// floating-point seconds, Redis's clock.
type redisRate struct {
	l   *redis_rate.Limiter
	lim redis_rate.Limit
}

func (r *redisRate) Allow(ctx context.Context, key string) (bool, error) {
	res, err := r.l.Allow(ctx, key, r.lim)
	if err != nil {
		return false, err
	}
	return res.Allowed > 0, nil
}

func newRedisRate(env Env, lim Limit) (*Built, error) {
	t := new(Traffic)
	rdb := NewClient(env, t)
	l := &redisRate{
		l:   redis_rate.NewLimiter(rdb),
		lim: redis_rate.Limit{Rate: lim.Rate, Period: lim.Period, Burst: lim.Burst},
	}
	return builtOnClient(l, rdb, t, ""), nil
}
