package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

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

// This example puts a fault proxy in front of a server that fails every
// command, so it needs no redis-server binary. With a real server, use
// redistest.Start(t) or redistest.Addr(t) in place of redistest.Failing.
func Example() {
	t := &exampleT{}
	defer t.finish()
	ctx := context.Background()

	// A Redis that is up but still loading its data.
	addr := redistest.Failing(t, "LOADING Redis is loading the dataset in memory")
	proxy := redistest.NewProxy(t, addr)
	rdb := redistest.NewClient(t, proxy.Addr())

	var reply redis.Error // an error reply from the server
	err := rdb.Get(ctx, "greeting").Err()
	fmt.Println("get:", err)
	fmt.Println("a reply from the server:", errors.As(err, &reply))

	// An outage: every connection through the proxy is reset, so no reply
	// comes back.
	proxy.SetRefuse(true)
	err = rdb.Get(ctx, "greeting").Err()
	fmt.Println("during the outage, a reply from the server:", errors.As(err, &reply))
	proxy.SetRefuse(false)

	fmt.Println("after the outage:", rdb.Get(ctx, "greeting").Err())

	// Output:
	// get: LOADING Redis is loading the dataset in memory
	// a reply from the server: true
	// during the outage, a reply from the server: false
	// after the outage: LOADING Redis is loading the dataset in memory
}
