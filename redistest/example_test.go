package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/redistest"
)

// exampleT stands in for the *testing.T that a real test receives, because
// examples receive none. It implements only what redistest uses. In a test,
// pass t itself.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (t *exampleT) Helper()                   {}
func (t *exampleT) Cleanup(f func())          { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

// finish runs the cleanups, last first, as the testing package does.
func (t *exampleT) finish() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// This example runs miniredis behind a fault proxy, so it needs no
// redis-server binary. With a real server, use redistest.Start(t) or
// redistest.Addr(t) in place of redistest.Miniredis(t).
func Example() {
	t := &exampleT{}
	defer t.finish()
	ctx := context.Background()

	m := redistest.Miniredis(t)
	proxy := redistest.NewProxy(t, m.Addr())
	rdb := redistest.NewClient(t, proxy.Addr())

	if err := rdb.Set(ctx, "greeting", "hello", time.Minute).Err(); err != nil {
		fmt.Println("set:", err)
		return
	}
	v, err := rdb.Get(ctx, "greeting").Result()
	fmt.Println("get:", v, err)

	// An outage: every connection through the proxy is reset.
	proxy.SetRefuse(true)
	fmt.Println("during outage, error:", rdb.Get(ctx, "greeting").Err() != nil)
	proxy.SetRefuse(false)

	// miniredis expires keys only when told that time has passed.
	m.FastForward(time.Minute)
	err = rdb.Get(ctx, "greeting").Err()
	fmt.Println("after a minute, expired:", errors.Is(err, redis.Nil))

	// Output:
	// get: hello <nil>
	// during outage, error: true
	// after a minute, expired: true
}
