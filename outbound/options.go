package outbound

import (
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Option configures a [Budget].
type Option func(*options)

type options struct {
	name     string
	failFast bool
	maxPause time.Duration
	leases   bool
	retries  int
	obs      Observer
}

func defaultOptions() options {
	return options{name: "default", maxPause: time.Hour, leases: true}
}

// WithName names the budget: its buckets are those of every budget of the
// same name and limit on a limiter with the same prefix, in any replica,
// and apart from other names'; the limits its upstreams announced lower
// are kept in the override set "outbound:"+name. It is also the name an
// [Observer] is told. It is 1 to 55 bytes without braces.
//
// Default: "default".
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithFailFast makes a call the budget cannot take at once fail with an
// error wrapping [ErrLimited], instead of waiting for the budget within
// its context.
//
// Default: false (wait; a context whose deadline comes first fails at
// once, without waiting for nothing).
func WithFailFast(on bool) Option { return func(o *options) { o.failFast = on } }

// WithMaxPause bounds the pause one response can ask for (Retry-After,
// or a quota that comes back later): a longer one pauses the calls for d.
// It must be from 1 s to [core.MaxPenalty].
//
// Default: 1 hour.
func WithMaxPause(d time.Duration) Option { return func(o *options) { o.maxPause = d } }

// WithLeases sets whether the upstream keys' buckets are decided with
// token leases ([core.Rule.WithTokenLeases], a quarter of the burst at
// most held in leases), which save a busy replica a round trip per call.
// A limit whose burst is too small for leases is decided without them.
//
// Default: true.
func WithLeases(on bool) Option { return func(o *options) { o.leases = on } }

// WithRetry makes a transport send a call again, up to n times, when the
// upstream answered 429 or 503 and asked for a pause: after the pause, if
// the request's context allows it and its body can be sent again (none,
// or GetBody set). The caller then sees the retried call's response.
//
// Default: 0 (the caller gets the 429 or 503).
func WithRetry(n int) Option { return func(o *options) { o.retries = n } }

// WithObserver sets the observer told of calls that waited, were refused
// and were paused.
//
// Default: none.
func WithObserver(obs Observer) Option { return func(o *options) { o.obs = obs } }

// validate checks o against the configured limit.
func (o *options) validate() error {
	switch {
	case o.name == "" || len(o.name) > 55 || strings.ContainsAny(o.name, "{}"):
		return errorf("WithName: name %q: want 1 to 55 bytes without braces", o.name)
	case o.maxPause < time.Second || o.maxPause > core.MaxPenalty:
		return errorf("WithMaxPause: %s is not from 1s to %s", o.maxPause, core.MaxPenalty)
	case o.retries < 0:
		return errorf("WithRetry: %d retries", o.retries)
	}
	return nil
}
