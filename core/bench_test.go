package core

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// BenchmarkLocalDecide is the local store's decision on a known key: the
// cost of every decision while Redis is down, and of the in-memory mode.
func BenchmarkLocalDecide(b *testing.B) {
	s := newLocalStore(100_000)
	p, _ := newPlan([]Limit{PerSecond(1 << 30)}, nil)
	now := int64(1_000_000_000)
	s.take(p.ID, "known", now, p.Ticks, 1, 0, 0)
	b.ReportAllocs()
	for b.Loop() {
		now++
		s.take(p.ID, "known", now, p.Ticks, 1, 0, 0)
	}
}

// BenchmarkDegradedAllow is a whole Allow call while the breaker is open:
// plan lookup, breaker check and the fallback bucket, on a known key.
func BenchmarkDegradedAllow(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Failing(b, loading), ContextTimeoutEnabled: true, MaxRetries: -1})
	b.Cleanup(func() { rdb.Close() })
	lim, err := New(rdb, WithLogger(slog.New(slog.DiscardHandler)), WithDenyCache(false))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	limit := PerSecond(1 << 30)
	for range 10 { // open the breaker
		lim.Allow(ctx, "known", limit)
	}
	if !redisOf(lim).WholeOpen() {
		b.Fatal("breaker did not open")
	}
	b.ReportAllocs()
	for b.Loop() {
		res, err := lim.Allow(ctx, "known", limit)
		if err != nil || !res.Degraded {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkMemoryAllow is Allow on an in-memory limiter, known key.
func BenchmarkMemoryAllow(b *testing.B) {
	lim, _ := NewMemory()
	ctx := context.Background()
	limit := PerSecond(1 << 30)
	b.ReportAllocs()
	for b.Loop() {
		lim.Allow(ctx, "known", limit)
	}
}

// BenchmarkDenyCacheHit is a denial answered by the deny cache.
func BenchmarkDenyCacheHit(b *testing.B) {
	srv := redistest.Start(b)
	lim, _ := New(redistest.NewClient(b, srv.Addr()))
	ctx := context.Background()
	limit := PerHour(1)
	lim.Allow(ctx, "abuser", limit)
	b.ReportAllocs()
	for b.Loop() {
		if res, _ := lim.Allow(ctx, "abuser", limit); res.Allowed {
			b.Fatal("admitted")
		}
	}
}

// BenchmarkRedisAllow is one decision on a real Redis, for comparison.
func BenchmarkRedisAllow(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redistest.NewClient(b, srv.Addr())
	lim, err := New(rdb, WithDenyCache(false))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	limit := PerSecond(1 << 30)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		if _, err := lim.Allow(ctx, "k"+strconv.Itoa(i&1023), limit); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoneDecision compares a lone decision, one caller and nothing
// to batch, with the bare script call it makes through the same client:
// the difference is what the limiter adds on the client (plan lookup,
// breaker, batcher, deny cache, local charge, result).
func BenchmarkLoneDecision(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redistest.NewClient(b, srv.Addr())
	ctx := context.Background()
	limit := Limit{Rate: 1000, Period: time.Second, Burst: 1000}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	b.Run("script", func(b *testing.B) {
		p, _ := newPlan([]Limit{limit}, nil)
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			i++
			c := redisstore.Query{Key: keys[i&1023], RKey: redisstore.RedisKey("bare:", p.FP, keys[i&1023]), Plan: &p.Plan, Cost: 1}
			c.SetRKey(c.RKey)
			if _, err := redisstore.EvalOne(ctx, rdb, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tc := range []struct {
		name string
		rdb  *redis.Client
	}{
		{"allow", rdb},
		// A client whose pool wait fits the budget: the budget travels as
		// a deadline, without a timer.
		{"allow/pooltimeout", redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, PoolTimeout: 50 * time.Millisecond})},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lim, err := New(tc.rdb)
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				if _, err := lim.Allow(ctx, keys[i&1023], limit); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRedisAllowManyKeys is the comparison's in-process cell of
// 10,000 keys at 64 callers as a Go benchmark, to profile: 32 goroutines a
// core, each deciding a key picked uniformly at random at 1000/s burst
// 1000 (never reached, so every decision is admitted and written).
func BenchmarkRedisAllowManyKeys(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redistest.NewClient(b, srv.Addr())
	lim, err := New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	limit := Limit{Rate: 1000, Period: time.Second, Burst: 1000}
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = "key:" + strconv.Itoa(i)
	}
	b.SetParallelism(32)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := lim.Allow(ctx, keys[rand.IntN(len(keys))], limit)
			if err != nil || !res.Allowed || res.Degraded {
				b.Errorf("Allow = %+v, %v", res, err)
				return
			}
		}
	})
}

// answerHook answers every command at once, without a connection: a
// script call that wants integers with an admission (flags 1, 999 left,
// as bucket.lua's reply), any other with two zeroes.
type answerHook struct{}

func (answerHook) DialHook(redis.DialHook) redis.DialHook {
	return func(context.Context, string, string) (net.Conn, error) { return nil, net.ErrClosed }
}

func (answerHook) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(context.Context, []redis.Cmder) error { return nil }
}

func (answerHook) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		switch c := cmd.(type) {
		case *redis.IntSliceCmd:
			// One key's reply, then the instant it was decided at
			// (redisstore.ReplyTime).
			c.SetVal([]int64{1, 999, 0, 1000, 0, 1_790_000_000_000_000})
		case *redis.Cmd:
			c.SetVal([]any{int64(0), int64(0)})
		}
		return nil
	}
}

// BenchmarkOwnWork is a lone decision on a go-redis client whose hook
// answers at once: the limiter's own work around a round trip (plan, key,
// batcher, breaker, reply, local charge, result) and go-redis's command
// and hooks, without the network or Redis, so that it can be profiled
// apart from them. The client is configured as docs/production.md's (a
// pool timeout within the budget, context deadlines honoured). One of its
// allocations is the hook's reply, which go-redis's reader makes in life.
func BenchmarkOwnWork(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1, PoolTimeout: 50 * time.Millisecond})
	rdb.AddHook(answerHook{})
	lim, err := New(rdb, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	limit := Limit{Rate: 1000, Period: time.Second, Burst: 1000}
	ctx := context.Background()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		res, err := lim.Allow(ctx, keys[i&1023], limit)
		if err != nil || !res.Allowed || res.Degraded || res.Remaining != 999 {
			b.Fatalf("decision %d: %+v, %v; want an admission from the hook's reply", i, res, err)
		}
	}
}

// BenchmarkMemoryAllowWarning is BenchmarkMemoryAllow with a warning
// threshold and a threshold handler: a key over the threshold, marked on
// every decision, crossing it no more (its event was raised once).
func BenchmarkMemoryAllowWarning(b *testing.B) {
	// A clock that stands still refills nothing, and a burst of 2³⁰
	// lasts any loop a benchmark runs; the threshold is 1,074 tokens
	// used, crossed before the loop.
	at := time.Now()
	lim, _ := NewMemory(WithThresholdHandler(func(ThresholdEvent) {}), WithClock(func() time.Time { return at }))
	ctx := context.Background()
	r, err := lim.Prepare(Limit{Rate: 1000, Period: time.Second, Burst: 1 << 30})
	if err == nil {
		r, err = r.WithWarning(0.000001)
	}
	if err != nil {
		b.Fatal(err)
	}
	for range 2000 {
		r.Allow(ctx, "known")
	}
	b.ReportAllocs()
	var res Result
	for b.Loop() {
		res, _ = r.Allow(ctx, "known")
	}
	if !res.Warning {
		b.Fatalf("%+v: not over the threshold", res)
	}
}
