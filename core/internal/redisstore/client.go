package redisstore

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

// ignoresBudget reports whether rdb's I/O can outlast budget: go-redis
// ignores context deadlines unless ContextTimeoutEnabled is set, and then
// a hung Redis holds each call for the client's own read or write timeout
// (5 s by default) whatever the limiter's budget. The store then runs each
// call in a goroutine of its own and stops waiting at the budget (see
// Store.detached). Clients the limiter does not know are trusted.
func ignoresBudget(rdb redis.Scripter, budget time.Duration) bool {
	if budget <= 0 {
		return false
	}
	ctxOK, rt, wt, known := clientDeadlines(rdb)
	if !known || ctxOK {
		return false
	}
	return max(effectiveTimeout(rt), effectiveTimeout(wt)) > budget
}

// ClientAdvice lists what in rdb's options costs the limiter safety or
// speed, with the fix, for the one log line New writes; nil if nothing.
func ClientAdvice(rdb redis.Scripter, budget time.Duration) []string {
	var advice []string
	if ignoresBudget(rdb, budget) {
		_, rt, wt, _ := clientDeadlines(rdb)
		advice = append(advice, fmt.Sprintf("ContextTimeoutEnabled is false, so the client ignores the limiter's %v budget: "+
			"each decision runs in a goroutine of its own, the caller stops waiting at the budget and the call ends "+
			"by the client's own timeouts (up to %v), and decisions are not batched; set ContextTimeoutEnabled: true",
			budget, max(effectiveTimeout(rt), effectiveTimeout(wt))))
	}
	if n := clientRetries(rdb); n > 0 {
		advice = append(advice, fmt.Sprintf("MaxRetries allows %d retries: a decision whose reply was lost runs again "+
			"and charges its bucket twice (a client is then denied early); set MaxRetries: -1", n))
	}
	return advice
}

// clientRetries is the number of retries rdb makes of a failed command,
// for the go-redis clients the limiter knows; 0 for others.
func clientRetries(rdb redis.Scripter) int {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().MaxRetries
	case *redis.ClusterClient:
		return c.Options().MaxRetries
	case *redis.Ring:
		return c.Options().MaxRetries
	}
	return 0
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
// [Outage.Node]. Cluster masters are named by their own addresses.
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
