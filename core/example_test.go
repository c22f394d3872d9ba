package core_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"go.uber.org/goleak"
)

// exampleRedis is an in-process Redis for the examples, with a frozen clock
// so their output is stable.
var exampleRedis *miniredis.Miniredis

func TestMain(m *testing.M) {
	exampleRedis = miniredis.NewMiniRedis()
	if err := exampleRedis.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exampleRedis.SetTime(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	code := m.Run()
	exampleRedis.Close()
	// The limiter starts no goroutines; every test closes what it opens.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := core.New(rdb, core.WithTimeout(time.Second)) // a budget for a busy test machine; production keeps 50ms
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		res, err := lim.Allow(ctx, "user:42", core.PerSecond(3))
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Allowed, res.Remaining, res.RetryAfter.Round(100*time.Millisecond))
	}
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 300ms
}

func ExampleLimiter_AllowN() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, _ := core.New(rdb, core.WithTimeout(time.Second))
	ctx := context.Background()
	// 10 per second and 9 per minute on one key, decided together: a
	// request must fit both, and a denied one consumes from neither.
	second, minute := core.PerSecond(10), core.PerMinute(9)
	for range 3 {
		res, err := lim.AllowN(ctx, "tenant:acme", 4, second, minute)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry=%v limit=%v\n", res.Allowed, res.Remaining, res.RetryAfter, res.Limit)
	}
	// Output:
	// allowed=true remaining=5 retry=0s limit=9/1m0s burst 9
	// allowed=true remaining=1 retry=0s limit=9/1m0s burst 9
	// allowed=false remaining=1 retry=20s limit=9/1m0s burst 9
}

func ExampleWithPenalty() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	// A denial locks the key for a minute on every replica.
	lim, _ := core.New(rdb, core.WithTimeout(time.Second), core.WithPenalty(time.Minute))
	ctx := context.Background()
	for range 3 {
		res, _ := lim.Allow(ctx, "ip:203.0.113.9", core.PerSecond(1))
		fmt.Println(res.Allowed, res.Locked, res.RetryAfter.Round(time.Second))
	}
	// Output:
	// true false 0s
	// false true 1m0s
	// false true 1m0s
}

func ExampleLimiter_Wait() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, _ := core.New(rdb, core.WithTimeout(time.Second))
	limit := core.PerSecond(20).WithBurst(1) // one every 50ms
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	for range 3 {
		if _, err := lim.Wait(ctx, "smooth", 1, limit); err != nil {
			panic(err)
		}
	}
	fmt.Println(time.Since(start) >= 100*time.Millisecond)
	// Output: true
}

// Reset releases a key locked by a penalty, for every replica.
func ExampleLimiter_Reset() {
	lim, _ := core.NewMemory(core.WithPenalty(time.Hour))
	ctx := context.Background()
	login := core.PerMinute(1)
	lim.Allow(ctx, "user:42", login)
	res, _ := lim.Allow(ctx, "user:42", login)
	fmt.Println("second attempt allowed:", res.Allowed)
	lim.Reset(ctx, "user:42", login) // after a password reset, say
	res, _ = lim.Allow(ctx, "user:42", login)
	fmt.Println("after Reset allowed:", res.Allowed)
	// Output:
	// second attempt allowed: false
	// after Reset allowed: true
}

// Peek shows what a request would get, without charging the key.
func ExampleLimiter_Peek() {
	lim, _ := core.NewMemory()
	ctx := context.Background()
	quota := core.PerMinute(3)
	lim.Allow(ctx, "tenant:acme", quota)
	res, _ := lim.Peek(ctx, "tenant:acme", quota)
	fmt.Println("allowed:", res.Allowed, "remaining:", res.Remaining)
	res, _ = lim.Peek(ctx, "tenant:acme", quota)
	fmt.Println("peeking again, remaining:", res.Remaining)
	// Output:
	// allowed: true remaining: 2
	// peeking again, remaining: 2
}

// ErrorReason classifies the store errors an Observer sees, as the
// sluiceprom metrics label them.
func ExampleErrorReason() {
	fmt.Println(core.ErrorReason(context.DeadlineExceeded))
	fmt.Println(core.ErrorReason(redis.ErrClosed))
	// Output:
	// timeout
	// connection
}

func ExampleLimiter_Prepare() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, _ := core.New(rdb, core.WithTimeout(time.Second))
	// A login handler's limits, validated and compiled once: 3 attempts a
	// minute and 10 an hour per user.
	login, err := lim.Prepare(core.PerMinute(3).WithName("login"), core.PerHour(10))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		res, err := login.Allow(ctx, "user:ada")
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Allowed, res.Remaining, res.RetryAfter.Round(time.Second))
	}
	// After a password reset, the user may try again at once.
	if err := login.Reset(ctx, "user:ada"); err != nil {
		panic(err)
	}
	res, _ := login.Allow(ctx, "user:ada")
	fmt.Println(res.Allowed, res.Remaining)
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 20s
	// true 2
}
