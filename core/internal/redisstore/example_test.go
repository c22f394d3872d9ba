package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/core/internal/redisstore"
)

// A stored name: the prefix, a hash tag derived from the key (so callers
// never steer Cluster slots), the plan's fingerprint and the key.
func ExampleRedisKey() {
	name := redisstore.RedisKey("rl:", "fp1", "tenant:acme")
	fmt.Println(strings.HasPrefix(name, "rl:{"), strings.HasSuffix(name, "fp1:tenant:acme"))
	// Output: true true
}

// Reason classifies a store error for metrics: a deadline is a timeout, a
// caller's own cancellation too, and anything unknown is "other".
func ExampleReason() {
	fmt.Println(redisstore.Reason(context.DeadlineExceeded))
	fmt.Println(redisstore.Reason(errors.New("something else")))
	fmt.Printf("%q\n", redisstore.Reason(nil))
	// Output:
	// timeout
	// other
	// ""
}
