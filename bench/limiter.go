// Package bench compares sluice with other Go rate limiters that keep their
// state in Redis, and with two in-process limiters for the local path.
//
// Every limiter is reached through one small interface, [Limiter], built by a
// [Peer] for one limit. The comparison itself is the command in cmd/compare;
// see README.md for what it measures and the latest results.
//
// This is a separate module so that users of sluice never download the
// peers. Its go.mod replaces sluice with the working tree one directory up.
package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Limit is one scenario's limit: Rate events per Period, with room for Burst
// events at once after a quiet spell (a token bucket of Burst tokens refilled
// at Rate/Period). Each peer maps it onto its own configuration as closely as
// it can, or refuses it with an error that says why.
type Limit struct {
	Rate   int
	Period time.Duration
	Burst  int
}

func (l Limit) String() string {
	return fmt.Sprintf("%d/%s burst %d", l.Rate, l.Period, l.Burst)
}

// PerSecondRate returns the limit's rate in events per second.
func (l Limit) PerSecondRate() float64 {
	return float64(l.Rate) / l.Period.Seconds()
}

// Ideal returns the most a perfect token bucket admits over an interval of
// length d that starts with a full bucket: Burst + d·Rate/Period.
func (l Limit) Ideal(d time.Duration) float64 {
	return float64(l.Burst) + d.Seconds()*l.PerSecondRate()
}

// Limiter is the one interface the comparison drives: decide one request on
// key under the limit the limiter was built for.
type Limiter interface {
	Allow(ctx context.Context, key string) (bool, error)
}

// ErrDegraded is returned by an adapter whose library decided without Redis
// (sluice's fallback, go-zero's in-process rescue limiter). The comparison
// counts such decisions apart: they say nothing about the store.
var ErrDegraded = errors.New("bench: decided without Redis")

// Env is what a peer needs to build a limiter.
type Env struct {
	// Addr is the Redis address (host:port).
	Addr string
	// PoolSize is the connection pool size for clients the adapter creates;
	// the comparison sets it to the largest number of concurrent callers,
	// and the fleet to ProductionPoolSize.
	PoolSize int
	// Production configures the limiter as docs/production.md recommends
	// for a service replica: its client gets 500 ms dial, read and write
	// timeouts, one dial attempt and MinIdleConns idle connections (see
	// NewClient), and sluice keeps its default 50 ms budget instead of
	// the comparison's 5 s. The fleet section sets it.
	Production bool
}

// The client settings of docs/production.md that Env.Production applies.
const (
	// ProductionPoolSize is the pool size docs/production.md gives its
	// example client; the fleet section gives it to every instance.
	ProductionPoolSize = 32
	// ProductionTimeout is the dial, read and write timeout.
	ProductionTimeout = 500 * time.Millisecond
	// ProductionMinIdle is the number of idle connections kept open.
	ProductionMinIdle = 4
	// ProductionMaxIdleTime is how long a connection may stay idle.
	ProductionMaxIdleTime = 2 * time.Minute
)

// Built is a limiter ready to use, with what it costs to close it.
type Built struct {
	Limiter Limiter
	// Traffic counts what the limiter's client sent to Redis; nil for
	// in-process limiters.
	Traffic *Traffic
	// Note describes how the scenario's limit was mapped onto the library's
	// configuration, when that is not one-to-one.
	Note string
	// Close releases the limiter's client, if it has one of its own.
	Close func()
}

// Peer is one limiter under comparison.
type Peer struct {
	// Name is the short name used in tables and by -only.
	Name string
	// Module is the Go module (and version, from the build info) measured.
	Module string
	// Redis is false for in-process limiters.
	Redis bool
	// Fleet marks a peer measured in the fleet section: Redis-backed, and
	// able to give each limiter instance a go-redis client of its own
	// (go-zero cannot: it keeps one client per address per process).
	Fleet bool
	// FleetOnly marks a peer measured only in the fleet section: floor, a
	// reference rather than a limiter.
	FleetOnly bool
	// DenyOnly marks a variant that is measured only where it differs from
	// its base: the deny-heavy scenario.
	DenyOnly bool
	// New builds a limiter for lim. It returns an error when the library
	// cannot express lim.
	New func(env Env, lim Limit) (*Built, error)
}

// Traffic counts the requests a go-redis client sends: round trips (a
// pipeline counts once) and commands (each command of a pipeline counts).
// It is a go-redis hook; its counters are safe for concurrent use.
type Traffic struct {
	RoundTrips atomic.Int64
	Commands   atomic.Int64
}

var _ redis.Hook = (*Traffic)(nil)

// DialHook implements redis.Hook; dials are not counted.
func (t *Traffic) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (t *Traffic) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		t.RoundTrips.Add(1)
		t.Commands.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (t *Traffic) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t.RoundTrips.Add(1)
		t.Commands.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Snapshot returns the counters' current values.
func (t *Traffic) Snapshot() (roundTrips, commands int64) {
	if t == nil {
		return 0, 0
	}
	return t.RoundTrips.Load(), t.Commands.Load()
}

// NewClient returns the go-redis client every go-redis based peer gets, so
// that they are configured alike: go-redis defaults (5 s read and write
// timeouts) except for the pool size, no retries, context deadlines honoured
// (sluice requires it; nobody else sets a deadline), and neither the
// maintenance-notification handshake nor CLIENT SETINFO on connect (go-zero's
// client is configured the same way). With env.Production it also takes
// docs/production.md's timeouts and idle connections. t, if not nil, is
// installed as a hook.
func NewClient(env Env, t *Traffic) *redis.Client {
	opt := &redis.Options{
		Addr:                     env.Addr,
		PoolSize:                 env.PoolSize,
		MaxRetries:               -1,
		ContextTimeoutEnabled:    true,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if env.Production {
		opt.DialTimeout = ProductionTimeout
		opt.DialerRetries = 1
		opt.ReadTimeout = ProductionTimeout
		opt.WriteTimeout = ProductionTimeout
		opt.MinIdleConns = ProductionMinIdle
		opt.ConnMaxIdleTime = ProductionMaxIdleTime
		// docs/production.md sets PoolTimeout to the limiter's budget;
		// here every library's only bound is the 500 ms timeout, which
		// sluice also gets as its budget, so it is that for all.
		opt.PoolTimeout = ProductionTimeout
	}
	rdb := redis.NewClient(opt)
	if t != nil {
		rdb.AddHook(t)
	}
	return rdb
}

// builtOnClient wraps a limiter that owns rdb.
func builtOnClient(l Limiter, rdb *redis.Client, t *Traffic, note string) *Built {
	return &Built{Limiter: l, Traffic: t, Note: note, Close: func() { _ = rdb.Close() }}
}

// IdealAdmitsIn returns how many of the requests counted per slot a
// perfect token bucket for l would admit, the bucket being full when slot
// 0 begins: counts[i] requests arrive in [i·slot, (i+1)·slot). With atEnd
// they are placed at their slot's end, the most a bucket could admit of
// them; else at its start, the least. The fleet comparison uses it where
// each call is counted but not kept.
func (l Limit) IdealAdmitsIn(counts []uint32, slot time.Duration, atEnd bool) int {
	const eps = 1e-9 // float rounding at a token's exact due time
	perSlot := l.PerSecondRate() * slot.Seconds()
	burst := float64(l.Burst)
	tokens, n := burst, 0
	for i, c := range counts {
		if i > 0 || atEnd {
			tokens = min(burst, tokens+perSlot)
		}
		take := min(float64(c), math.Floor(tokens+eps))
		if take > 0 {
			tokens -= take
			n += int(take)
		}
	}
	return n
}

// IdealAdmits returns how many of the requests sent at times sends a perfect
// token bucket for l would admit, the bucket being full at the first send.
// The comparison uses it where the request times are known, so that a stall
// of the sender (a descheduled goroutine, a slow call) does not count against
// a limiter.
func (l Limit) IdealAdmits(sends []time.Time) int {
	if len(sends) == 0 {
		return 0
	}
	const eps = 1e-9 // float rounding at a token's exact due time
	perSec := l.PerSecondRate()
	burst := float64(l.Burst)
	tokens, last, n := burst, sends[0], 0
	for _, s := range sends {
		tokens = min(burst, tokens+s.Sub(last).Seconds()*perSec)
		last = s
		if tokens >= 1-eps {
			tokens--
			n++
		}
	}
	return n
}
