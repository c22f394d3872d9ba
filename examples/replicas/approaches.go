package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
)

// tenantHeader carries the tenant every request belongs to. Clients can
// write it, so it is only safe behind a gateway that sets it; here the load
// generator stands in for that gateway.
const tenantHeader = "X-Tenant-ID"

// approach is one way of limiting. newReplica builds replica i, whose
// handler answers 200 or 429 and tells rec about store trouble.
type approach struct {
	name       string
	newReplica func(i int, prefix string, rec *recorder) (replica, error)
}

// replica is one replica's limited handler and what it holds.
type replica struct {
	handler   http.Handler
	close     func()     // releases what the replica holds, once it serves no more
	fleetSize func() int // the instances its limiter counts; nil without a fleet
}

// ok is every replica's application: it answers 200.
var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = w.Write([]byte("ok\n"))
})

func (d *demo) approaches() []approach {
	return []approach{d.memoryBuckets(), d.fixedWindow(), d.sluice()}
}

// memoryBuckets gives each replica its own in-process limiter at the full
// limit: the same middleware and the same bucket arithmetic as sluice, but
// nothing is shared, so n replicas admit up to n times the limit, and how
// much more depends on how the load balancer spreads the traffic.
func (d *demo) memoryBuckets() approach {
	return approach{
		name: "per-replica memory buckets",
		newReplica: func(int, string, *recorder) (replica, error) {
			lim, err := core.NewMemory()
			if err != nil {
				return replica{}, err
			}
			h := httplimit.New(lim, d.cfg.limitSpec(), keyfunc.Tenant(tenantHeader), httplimit.WithScope("api"))(ok)
			return replica{handler: h, close: func() {}}, nil
		},
	}
}

// fixedWindow is the counter most Redis rate-limiting posts start from:
// INCR a key named after the current second, EXPIRE it when it is new, and
// deny past the limit. When Redis fails it lets the request through, the
// usual choice for not taking the API down with its limiter.
func (d *demo) fixedWindow() approach {
	return approach{
		name: "Redis fixed window",
		newReplica: func(_ int, prefix string, rec *recorder) (replica, error) {
			rdb := redis.NewClient(&redis.Options{Addr: d.proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			limit := int64(d.cfg.limit)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, cancel := context.WithTimeout(r.Context(), 50*time.Millisecond)
				defer cancel()
				now := time.Now()
				n, err := countInWindow(ctx, rdb, fmt.Sprintf("%s%s:%d", prefix, r.Header.Get(tenantHeader), now.Unix()))
				if err != nil {
					rec.degradedAt(now) // fail open
				} else if n > limit {
					http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
					return
				}
				ok(w, r)
			})
			return replica{handler: h, close: func() { rdb.Close() }}, nil
		},
	}
}

// countInWindow is the fixed window: one INCR per request, and an EXPIRE on
// the window's first request so that old windows disappear.
func countInWindow(ctx context.Context, rdb *redis.Client, key string) (int64, error) {
	n, err := rdb.Incr(ctx, key).Result()
	if err == nil && n == 1 {
		err = rdb.Expire(ctx, key, 2*time.Second).Err()
	}
	return n, err
}

// sluice gives each replica its own Redis client and Limiter, as separate
// pods would have, all on the same Redis. The limiters form a fleet: each
// counts the live instances through a heartbeat in Redis, and while Redis
// is away each replica falls back to 1/n of the limit, n the last count.
// Nobody tells them how many replicas run, so a scale-out needs no
// redeploy.
func (d *demo) sluice() approach {
	// A heartbeat of 500ms (the default is 1s) lets the demo's short runs
	// count a scale-out in about a second; a service would keep the
	// default, which costs one script call a second per replica. Shorter
	// beats get counted sooner, but each beat must reach Redis within one
	// heartbeat, and a busy machine running the embedded miniredis can
	// miss 250ms.
	fleet := core.WithFleet(core.Fleet{Name: "api", Heartbeat: 500 * time.Millisecond})
	return d.sluiceSized("sluice", fleet)
}

// sluiceStatic is sluice with the fallback sized the old way: each replica
// enforces 1/n of the limit, n fixed at deploy time.
func (d *demo) sluiceStatic(n int) approach {
	return d.sluiceSized(fmt.Sprintf("sluice, WithFallbackReplicas(%d)", n), core.WithFallbackReplicas(n))
}

// sluiceSized is sluice with the fallback sized by sizing. The limiters of
// one run share its prefix, so a fleet counts only its own run's replicas.
func (d *demo) sluiceSized(name string, sizing core.Option) approach {
	return approach{
		name: name,
		newReplica: func(i int, prefix string, rec *recorder) (replica, error) {
			// The client core.New recommends: the limiter's time budget
			// reaches the socket, and a lost reply is not retried (which
			// would charge its bucket twice).
			rdb := redis.NewClient(&redis.Options{Addr: d.proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			lim, err := core.New(rdb,
				core.WithPrefix(prefix),
				sizing,
				core.WithObserver(replicaObserver{rec, i}),
				core.WithLogger(d.logger))
			if err != nil {
				rdb.Close()
				return replica{}, err
			}
			r := replica{
				// Every replica makes its middleware at this line, so they
				// would share buckets by default too; the scope says so
				// where a reader can see it (and keeps the buckets if this
				// line moves).
				handler: httplimit.New(lim, d.cfg.limitSpec(), keyfunc.Tenant(tenantHeader), httplimit.WithScope("api"))(ok),
				close: func() {
					// Close stops the heartbeat and leaves the fleet. Its only
					// error is a failed leave (Redis away when the demo is
					// interrupted): the member then ages out in 3 heartbeats.
					_ = lim.Close()
					rdb.Close()
				},
			}
			if lim.FleetSize() > 0 { // 0 means no fleet; a fleet counts at least 1
				r.fleetSize = lim.FleetSize
			}
			return r, nil
		},
	}
}

// go-redis logs every failed dial to the standard logger: thousands of
// lines during the outage, which the limiters report on their own.
func init() { redis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
