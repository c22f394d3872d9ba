package core

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// clientDeadlines reports, for the go-redis clients the limiter knows,
// whether they pass context deadlines to the socket and their own read and
// write timeouts. ok is false for other Scripter implementations.
func clientDeadlines(rdb redis.Scripter) (ctxDeadlines bool, read, write time.Duration, ok bool) {
	switch c := rdb.(type) {
	case *redis.Client:
		o := c.Options()
		return o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout, true
	case *redis.ClusterClient:
		o := c.Options()
		return o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout, true
	case *redis.Ring:
		o := c.Options()
		return o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout, true
	}
	return false, 0, 0, false
}

// effectiveTimeout is the deadline go-redis applies for a configured
// timeout: its default (5s in v9.22; Options() normally reports the value
// already filled in) when unset, none when negative.
func effectiveTimeout(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return 5 * time.Second
	case d < 0:
		return 1<<63 - 1
	}
	return d
}

// checkClient makes sure the limiter's time budget can hold on rdb. go-redis
// ignores context deadlines unless ContextTimeoutEnabled is set, and then a
// hung Redis stalls each request for the client's read timeout (5s by
// default) whatever budget the limiter was given.
func checkClient(rdb redis.Scripter, budget time.Duration) error {
	if budget <= 0 {
		return nil
	}
	ctxOK, rt, wt, known := clientDeadlines(rdb)
	if !known || ctxOK {
		return nil
	}
	worst := max(effectiveTimeout(rt), effectiveTimeout(wt))
	if worst <= budget {
		return nil
	}
	stall := "indefinitely"
	if worst < 1<<63-1 {
		stall = "for up to " + worst.String()
	}
	return fmt.Errorf("core: the Redis client ignores context deadlines, so the limiter's %s budget cannot hold "+
		"(a hung Redis would stall each request %s): set ContextTimeoutEnabled: true in the client's options, "+
		"or pass core.WithTimeout(0) to rely on the client's own timeouts", budget, stall)
}

// boundsWaits reports whether rdb bounds every wait of a call by budget
// through deadlines alone, so that the limiter can pass its budget as a
// context deadline without a timer: the client sets socket deadlines from
// the context (or its own timeouts fit the budget), and waits for a pooled
// connection no longer than the budget (PoolTimeout). Otherwise only a
// context whose Done closes at the budget would end a wait for a
// connection in time.
func boundsWaits(rdb redis.Scripter, budget time.Duration) bool {
	var pool time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		pool = c.Options().PoolTimeout
	case *redis.ClusterClient:
		pool = c.Options().PoolTimeout
	case *redis.Ring:
		pool = c.Options().PoolTimeout
	default:
		return false
	}
	ctxOK, rt, wt, _ := clientDeadlines(rdb)
	sockets := ctxOK || max(effectiveTimeout(rt), effectiveTimeout(wt)) <= budget
	return sockets && pool > 0 && pool <= budget
}

// nodeName names the node a client's single breaker guards, for logs and
// [StoreOutage.Node]. Cluster masters are named by their own addresses.
func nodeName(rdb redis.Scripter) string {
	switch c := rdb.(type) {
	case *redis.Client:
		if addr := c.Options().Addr; addr != "FailoverClient" {
			return addr
		}
		return "sentinel"
	case *redis.ClusterClient:
		return "cluster"
	case *redis.Ring:
		return "ring"
	}
	return "redis"
}
