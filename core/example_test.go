package core_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/testkit"
)

// TestMain starts the examples' Redis, runs the tests and examples, and
// then checks that no goroutine of sluice outlived them: the limiter
// starts none of its own, and every test closes what it opens. Without
// redis-server on PATH, core's tests do not run: TestMain fails under CI
// and otherwise says why and exits 0 (see testkit.MainWithRedis).
func TestMain(m *testing.M) { os.Exit(testkit.MainWithRedis(m, "core")) }

// exampleAddr returns the examples' Redis, emptied first.
func exampleAddr() string { return testkit.ExampleAddr() }

// upToSecond rounds d up to whole seconds, as a Retry-After header does,
// so that the milliseconds an example takes on Redis's real clock do not
// show in its output.
func upToSecond(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := core.New(rdb, core.WithTimeout(time.Second)) // a budget for a busy test machine; production keeps 50ms
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		res, err := lim.Allow(ctx, "user:42", core.PerMinute(3))
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Allowed, res.Remaining, upToSecond(res.RetryAfter))
	}
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 20s
}

// A replica with a caller or two at a time sends most decisions alone:
// WithOwnConnections sends those on a few connections of the limiter's
// own, dialled as the client would, without the pool's work per command.
func ExampleWithOwnConnections() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	lim, err := core.New(rdb, core.WithOwnConnections(true), core.WithTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	defer lim.Close() // closes the limiter's own connections
	ctx := context.Background()
	for range 3 {
		res, err := lim.Allow(ctx, "user:7", core.PerMinute(2))
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Allowed, res.Remaining, res.Degraded)
	}
	// Output:
	// true 1 false
	// true 0 false
	// false 0 false
}

func ExampleLimiter_AllowN() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr(), ContextTimeoutEnabled: true})
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
		fmt.Printf("allowed=%v remaining=%d retry=%v limit=%v\n", res.Allowed, res.Remaining, upToSecond(res.RetryAfter), res.Limit)
	}
	// Output:
	// allowed=true remaining=5 retry=0s limit=9/1m0s burst 9
	// allowed=true remaining=1 retry=0s limit=9/1m0s burst 9
	// allowed=false remaining=1 retry=20s limit=9/1m0s burst 9
}

func ExampleWithPenalty() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	// A denial locks the key for an hour on every replica.
	lim, _ := core.New(rdb, core.WithTimeout(time.Second), core.WithPenalty(time.Hour))
	ctx := context.Background()
	for range 3 {
		res, _ := lim.Allow(ctx, "ip:203.0.113.9", core.PerMinute(1))
		fmt.Println(res.Allowed, res.Locked, upToSecond(res.RetryAfter))
	}
	// Output:
	// true false 0s
	// false true 1h0m0s
	// false true 1h0m0s
}

func ExampleLimiter_Wait() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr(), ContextTimeoutEnabled: true})
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
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr(), ContextTimeoutEnabled: true})
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
		fmt.Println(res.Allowed, res.Remaining, upToSecond(res.RetryAfter))
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

func ExampleLimiter_PrepareConcurrency() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, _ := core.New(rdb, core.WithTimeout(time.Second))
	defer lim.Close() // stops renewing leases
	// At most two uploads in flight per tenant, across every replica.
	uploads, err := lim.PrepareConcurrency(core.ConcurrencyLimit{Name: "uploads", Max: 2})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	var held []*core.Lease
	for range 3 {
		ls, err := uploads.Acquire(ctx, "tenant:acme")
		if err != nil {
			panic(err)
		}
		fmt.Println(ls.Acquired, ls.InFlight)
		if ls.Acquired {
			held = append(held, ls)
		}
	}
	// A request that ends gives its slot back (defer ls.Release in a
	// handler, so a panic does too).
	_ = held[0].Release(ctx)
	ls, _ := uploads.Acquire(ctx, "tenant:acme")
	fmt.Println(ls.Acquired, ls.InFlight)
	// Output:
	// true 1
	// true 2
	// false 2
	// true 2
}

func ExampleRule_Reserve() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, _ := core.New(rdb, core.WithTimeout(time.Second))
	// 100 tokens a minute per tenant, charged by what a call really used.
	tokens, err := lim.Prepare(core.PerMinute(100))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	rv, err := tokens.Reserve(ctx, "tenant:acme", 40) // the estimate
	if err != nil {
		panic(err)
	}
	fmt.Println(rv.Result.Allowed, rv.Result.Remaining)
	// The call used 25 tokens: the other 15 are refunded.
	if err := rv.Settle(ctx, 25); err != nil {
		panic(err)
	}
	// A retried settlement changes nothing.
	fmt.Println(errors.Is(rv.Settle(ctx, 25), core.ErrSettled))
	res, _ := tokens.Peek(ctx, "tenant:acme")
	fmt.Println(res.Remaining)
	// Output:
	// true 60
	// true
	// 75
}
