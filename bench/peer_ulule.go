package bench

import (
	"context"
	"fmt"
	"math/big"
	"time"

	"github.com/ulule/limiter/v3"
	redisstore "github.com/ulule/limiter/v3/drivers/store/redis"
)

// ulule adapts ulule/limiter's Redis store: a fixed window counted with
// INCRBY, expiring PERIOD after the window's first request. It has no burst
// of its own, so the scenario's limit becomes Burst requests per window of
// Burst·Period/Rate: the same long-run rate, and the same most-at-once.
type ulule struct {
	l *limiter.Limiter
}

func (u *ulule) Allow(ctx context.Context, key string) (bool, error) {
	c, err := u.l.Get(ctx, key)
	if err != nil {
		return false, err
	}
	return !c.Reached, nil
}

// ululeWindow maps lim onto a fixed window. The store sets the window's TTL in
// whole milliseconds, so the window must be one.
func ululeWindow(lim Limit) (time.Duration, error) {
	w, rem := new(big.Int).QuoRem(
		new(big.Int).Mul(big.NewInt(int64(lim.Period)), big.NewInt(int64(lim.Burst))),
		big.NewInt(int64(lim.Rate)), new(big.Int))
	if rem.Sign() != 0 || !w.IsInt64() || w.Int64() <= 0 || w.Int64()%int64(time.Millisecond) != 0 {
		return 0, fmt.Errorf("a window of %d·%s/%d is not a whole number of milliseconds", lim.Burst, lim.Period, lim.Rate)
	}
	return time.Duration(w.Int64()), nil
}

func newUlule(env Env, lim Limit) (*Built, error) {
	w, err := ululeWindow(lim)
	if err != nil {
		return nil, err
	}
	t := new(Traffic)
	rdb := NewClient(env, t)
	store, err := redisstore.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: "ulule"})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	l := &ulule{l: limiter.New(store, limiter.Rate{Period: w, Limit: int64(lim.Burst)})}
	note := ""
	if w != lim.Period || lim.Burst != lim.Rate {
		note = fmt.Sprintf("fixed window: %d per %s", lim.Burst, w)
	}
	return builtOnClient(l, rdb, t, note), nil
}
