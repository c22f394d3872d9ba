package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
)

// Config is the file's content.
type Config struct {
	// Redis is host:port. Empty: REDIS_ADDR, or an embedded miniredis.
	Redis string `json:"redis"`
	// Failure is what the limiter does while Redis is down: "fallback_local"
	// (the default), "fail_open" or "fail_closed".
	Failure string `json:"failure"`
	// Replicas is how many replicas share the traffic; under fallback_local
	// each enforces 1/Replicas of every limit while Redis is down.
	Replicas int `json:"replicas"`
	// TrustedProxies may name the client in X-Forwarded-For (the ip key).
	TrustedProxies []string `json:"trusted_proxies"`
	// Default is the limit of the routes that name none.
	Default core.Limit `json:"default"`
	// Routes are the endpoints, each with its own buckets.
	Routes []Route `json:"routes"`
}

// Route is one endpoint and its limit.
type Route struct {
	// Pattern is an http.ServeMux pattern, such as "GET /items/{id}".
	Pattern string `json:"pattern"`
	// Limit is text ("600/m", "5/15m burst 2 name login") or an object
	// ({"rate": 5, "period": "15m", "burst": 2}). Default: Config.Default.
	Limit core.Limit `json:"limit"`
	// Key is what the limit counts per: "ip" (the default), "tenant",
	// "user" or "global".
	Key string `json:"key"`
	// Scope names the route's buckets. Default: its route. Routes with the
	// same scope and limit share their buckets.
	Scope string `json:"scope"`
}

// load decodes a configuration. Unknown fields are errors, and each limit
// is read by core.Limit itself.
func load(data []byte) (*Config, error) {
	var cfg Config
	if err := decodeStrict(data, &cfg); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// UnmarshalJSON decodes a route strictly, naming it in errors: encoding/json
// says which field is unknown or which limit is bad, not where.
func (rt *Route) UnmarshalJSON(data []byte) error {
	type plain Route // Route without this method
	if err := decodeStrict(data, (*plain)(rt)); err != nil {
		// The decoder goes on after a bad field, so Pattern is set if present.
		return fmt.Errorf("route %q: %w", rt.Pattern, err)
	}
	return nil
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// failurePolicies are the values of Config.Failure.
var failurePolicies = map[string]core.FailurePolicy{
	"":               core.FallbackLocal,
	"fallback_local": core.FallbackLocal,
	"fail_open":      core.FailOpen,
	"fail_closed":    core.FailClosed,
}

// limiterOptions returns the options of the limiter, for core.New.
func (c *Config) limiterOptions() ([]core.Option, error) {
	policy, ok := failurePolicies[c.Failure]
	if !ok {
		return nil, fmt.Errorf("failure %q: want fallback_local, fail_open or fail_closed", c.Failure)
	}
	opts := []core.Option{core.WithFailurePolicy(policy)}
	if c.Replicas != 0 {
		opts = append(opts, core.WithFallbackReplicas(c.Replicas))
	}
	return opts, nil
}

// keys returns the key functions that Route.Key names. Tenant and user come
// from headers, which only a gateway that overwrites them makes safe.
func (c *Config) keys() (map[string]keyfunc.Func, error) {
	proxies, err := keyfunc.ParseProxies(c.TrustedProxies...)
	if err != nil {
		return nil, fmt.Errorf("trusted_proxies: %w", err)
	}
	return map[string]keyfunc.Func{
		"ip":     keyfunc.IP(keyfunc.TrustPrefixes(proxies...)),
		"tenant": keyfunc.Tenant("X-Tenant-ID"),
		"user":   keyfunc.Header("X-User-ID"),
		"global": keyfunc.Static("global"),
	}, nil
}

// Handler returns a mux that serves app on every route, behind the route's
// limit on lim. Errors name the route and what is wrong with it.
func (c *Config) Handler(lim *core.Limiter, app http.Handler) (http.Handler, error) {
	keys, err := c.keys()
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	for i, rt := range c.Routes {
		if rt.Pattern == "" {
			return nil, fmt.Errorf("routes[%d]: no pattern", i)
		}
		limit := cmp.Or(rt.Limit, c.Default)
		if limit == (core.Limit{}) {
			return nil, fmt.Errorf("route %q: no limit, and no default", rt.Pattern)
		}
		key, ok := keys[cmp.Or(rt.Key, "ip")]
		if !ok {
			return nil, fmt.Errorf("route %q: key %q: want one of %s", rt.Pattern, rt.Key,
				strings.Join(slices.Sorted(maps.Keys(keys)), ", "))
		}
		// One middleware per route, made in this loop with the same
		// options: each counts its route in buckets of its own
		// (WithPerRoute), unless the route names a scope. Without either,
		// two routes with the same limit would share one budget.
		opts := []httplimit.Option{httplimit.WithPerRoute(true)}
		if rt.Scope != "" {
			opts = []httplimit.Option{httplimit.WithScope(rt.Scope)}
		}
		mw, err := httplimit.Build(lim, limit, key, opts...)
		if err != nil {
			return nil, fmt.Errorf("route %q: %w", rt.Pattern, err)
		}
		if err := handle(mux, rt.Pattern, mw(app)); err != nil {
			return nil, fmt.Errorf("route %q: %w", rt.Pattern, err)
		}
	}
	return mux, nil
}

// handle registers h, turning ServeMux's panic on a bad or conflicting
// pattern into an error.
func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = errors.New(fmt.Sprint(p))
		}
	}()
	mux.Handle(pattern, h)
	return nil
}
