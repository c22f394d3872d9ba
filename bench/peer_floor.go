package bench

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// floorScript is the least a limiter that keeps its state in Redis, on
// Redis's clock, can do in one script call: read TIME, GET the key, SET it
// with an expiry. The subtraction stands in for the arithmetic; nothing is
// limited.
var floorScript = redis.NewScript(`local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local last = tonumber(redis.call('GET', KEYS[1])) or now
redis.call('SET', KEYS[1], now, 'PX', ARGV[1])
return now - last`)

// floor is not a limiter but the measured cost floor of one: one EVALSHA
// of floorScript per decision, and every request admitted.
type floor struct {
	rdb *redis.Client
	ttl string // milliseconds
}

func (f *floor) Allow(ctx context.Context, key string) (bool, error) {
	if err := floorScript.Run(ctx, f.rdb, []string{"floor:" + key}, f.ttl).Err(); err != nil {
		return false, err
	}
	return true, nil
}

// newFloor builds a floor whose keys expire when the limit's bucket would
// be full again (Burst·Period/Rate), as the GCRA limiters' keys do.
func newFloor(env Env, lim Limit) (*Built, error) {
	ttl := time.Duration(float64(lim.Period) * float64(lim.Burst) / float64(lim.Rate))
	t := new(Traffic)
	rdb := NewClient(env, t)
	f := &floor{rdb: rdb, ttl: strconv.FormatInt(max(ttl.Milliseconds(), 1), 10)}
	return builtOnClient(f, rdb, t, ""), nil
}
