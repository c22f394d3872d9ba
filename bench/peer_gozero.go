package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/zeromicro/go-zero/core/limit"
	"github.com/zeromicro/go-zero/core/logx"
	zredis "github.com/zeromicro/go-zero/core/stores/redis"
)

// goZero adapts go-zero's TokenLimiter. A TokenLimiter is bound to one key
// when it is made, so the adapter keeps one per key in a sync.Map.
//
// go-zero decides in process, with a golang.org/x/time/rate "rescue" limiter,
// whenever its Redis script fails, and keeps doing so until a PING succeeds
// (checked every 100 ms). It does not tell its caller. The adapter finds out
// with a hook on go-zero's client: the hook marks the request's context when
// the script call got an answer, and a decision without the mark is reported
// as ErrDegraded.
type goZero struct {
	store *zredis.Redis
	rate  int
	burst int
	keys  sync.Map // string → *limit.TokenLimiter
}

type decidedKey struct{}

// decided is set by the hook when go-zero's script got an answer.
type decided struct{ ok bool }

var decidedPool = sync.Pool{New: func() any { return new(decided) }}

func (g *goZero) Allow(ctx context.Context, key string) (bool, error) {
	v, ok := g.keys.Load(key)
	if !ok {
		v, _ = g.keys.LoadOrStore(key, limit.NewTokenLimiter(g.rate, g.burst, g.store, key))
	}
	d := decidedPool.Get().(*decided)
	d.ok = false
	allowed := v.(*limit.TokenLimiter).AllowCtx(context.WithValue(ctx, decidedKey{}, d))
	ok = d.ok
	decidedPool.Put(d)
	if !ok {
		return allowed, ErrDegraded
	}
	return allowed, nil
}

// goZeroHook counts go-zero's traffic and marks answered script calls. It is
// installed on go-zero's shared client for the address (see goZeroStore).
type goZeroHook struct{ t *Traffic }

func (h goZeroHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h goZeroHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	next = h.t.ProcessHook(next)
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		switch cmd.Name() {
		case "evalsha", "eval":
			if err == nil || err == redis.Nil {
				if d, ok := ctx.Value(decidedKey{}).(*decided); ok {
					d.ok = true
				}
			}
		}
		return err
	}
}

func (h goZeroHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return h.t.ProcessPipelineHook(next)
}

// go-zero keeps one go-redis client per address for the whole process, made
// by the first *zredis.Redis that uses it and configured by go-zero alone
// (pool of 10 per GOMAXPROCS, 3 retries, 8 idle connections). So there is one
// store, and one hook, per address for the whole run.
var goZeroStores = struct {
	sync.Mutex
	m map[string]*goZeroShared
}{m: map[string]*goZeroShared{}}

type goZeroShared struct {
	store   *zredis.Redis
	traffic *Traffic
}

func goZeroStore(addr string) *goZeroShared {
	goZeroStores.Lock()
	defer goZeroStores.Unlock()
	if s := goZeroStores.m[addr]; s != nil {
		return s
	}
	logx.Disable() // its error and slow-call logs would land in the tables
	t := new(Traffic)
	// WithIdentity skips CLIENT SETINFO on connect (go-redis's
	// DisableIdentity), as go-zero advises for servers older than Redis 7.2:
	// they answer it with an error, which go-zero's breaker counts as a
	// failure, so a burst of new connections opens the breaker.
	s := &goZeroShared{store: zredis.New(addr, zredis.WithIdentity(), zredis.WithHook(goZeroHook{t: t})), traffic: t}
	// Load go-zero's script into Redis with one call before any concurrent
	// use. Otherwise the first concurrent callers all get NOSCRIPT, go-zero's
	// breaker counts those as failures and then refuses calls, and go-zero
	// decides in process for seconds: real behaviour against a Redis whose
	// script cache is empty, but not what this comparison is about.
	limit.NewTokenLimiter(1, 1, s.store, "bench:load-script").Allow()
	goZeroStores.m[addr] = s
	return s
}

func newGoZero(env Env, lim Limit) (*Built, error) {
	// TokenLimiter's rate is an integer number of events per second.
	perSec := int64(lim.Rate) * int64(time.Second)
	if perSec%int64(lim.Period) != 0 || perSec/int64(lim.Period) < 1 {
		return nil, fmt.Errorf("its rate is a whole number of events per second; %d/%s is not", lim.Rate, lim.Period)
	}
	s := goZeroStore(env.Addr)
	g := &goZero{store: s.store, rate: int(perSec / int64(lim.Period)), burst: lim.Burst}
	return &Built{Limiter: g, Traffic: s.traffic, Close: func() {}}, nil
}
