package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/sluiceprom"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
)

// newClient returns the limiter's go-redis client, with the options that
// docs/production.md recommends for a limiter. warm keeps a few idle
// connections open, which go-redis starts dialing at once; -check and the
// tests, which must not dial, leave it off.
func newClient(addr string, rc RedisConfig, warm bool) *redis.Client {
	idle := 0
	if warm {
		idle = max(rc.Batching, 1)
		if rc.PoolSize > 0 {
			idle = min(idle, rc.PoolSize)
		}
	}
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,                   // the limiter's budget reaches the socket
		MaxRetries:            -1,                     // a retried decision would charge twice
		DialTimeout:           500 * time.Millisecond, // bounds go-redis's background re-dial
		DialerRetries:         1,                      // a refused dial fails at once, not after the budget
		ReadTimeout:           500 * time.Millisecond, // backstop for calls without a deadline
		WriteTimeout:          500 * time.Millisecond,
		PoolSize:              rc.PoolSize,
		MinIdleConns:          idle,            // no dial inside a request's budget after a quiet spell
		ConnMaxIdleTime:       2 * time.Minute, // below common NAT and proxy idle timeouts
	})
}

// app is a configuration turned into running parts.
type app struct {
	handler http.Handler                    // the API, limits included
	metrics http.Handler                    // the Prometheus endpoint
	engines map[time.Duration]*core.Limiter // one per penalty duration
}

// Context keys under which the authentication middleware stores the
// tenant's name (read by keyfunc.TenantValue) and its plan's limit.
type (
	tenantKey struct{}
	planKey   struct{}
)

// build creates the limiters, the middlewares and the routes of cfg on rdb.
// It does no network I/O.
func build(cfg *Config, rdb redis.Scripter, logger *slog.Logger) (*app, error) {
	obs := sluiceprom.New()
	reg := prometheus.NewRegistry()
	if err := reg.Register(obs); err != nil {
		return nil, err
	}
	a := &app{
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		engines: map[time.Duration]*core.Limiter{},
	}
	// WithPenalty is a setting of the engine, so routes with different
	// penalties get engines of their own. They share the Redis client, the
	// key prefix and the metrics; engines hold no connections of their own.
	engine := func(penalty time.Duration) (*core.Limiter, error) {
		if lim := a.engines[penalty]; lim != nil {
			return lim, nil
		}
		lim, err := core.New(rdb,
			core.WithPrefix(cfg.Redis.Prefix),
			core.WithTimeout(cfg.Redis.Timeout),
			core.WithBatching(cfg.Redis.Batching),
			core.WithFailurePolicy(cfg.Policy),
			core.WithFallbackReplicas(cfg.FallbackReplicas),
			core.WithPenalty(penalty),
			core.WithObserver(obs),
			core.WithLogger(logger),
		)
		if err != nil {
			return nil, err
		}
		a.engines[penalty] = lim
		return lim, nil
	}

	var ipOpts []keyfunc.IPOption
	if len(cfg.TrustedProxies) > 0 {
		ipOpts = append(ipOpts, keyfunc.TrustPrefixes(cfg.TrustedProxies...))
		if cfg.TrustedHeader != "" {
			ipOpts = append(ipOpts, keyfunc.TrustHeader(cfg.TrustedHeader))
		}
	}
	common := []httplimit.Option{httplimit.WithHeaders(cfg.Headers), httplimit.WithProblemJSON(cfg.ProblemJSON)}

	tenants := map[string]tenantInfo{}
	for _, t := range cfg.Tenants {
		for _, k := range t.APIKeys {
			tenants[k] = tenantInfo{name: t.Name, plan: cfg.Plans[t.Plan]}
		}
	}
	// A limit func needs a valid limit to stand in for it at construction;
	// any plan will do.
	var anyPlan core.Limit
	if names := sortedKeys(cfg.Plans); len(names) > 0 {
		anyPlan = cfg.Plans[names[0]]
	}

	mux := http.NewServeMux()
	for i, rt := range cfg.Routes {
		var h http.Handler = endpoint(rt.Pattern)
		if rt.limited() {
			lim, err := engine(rt.Penalty)
			if err != nil {
				return nil, fmt.Errorf("routes[%d]: %w", i, err)
			}
			opts := append([]httplimit.Option(nil), common...)
			limit := anyPlan
			if rt.Limit != nil {
				limit = *rt.Limit
			} else {
				opts = append(opts, httplimit.WithLimitFunc(planLimit))
			}
			if len(rt.ExtraLimits) > 0 {
				opts = append(opts, httplimit.WithLimits(rt.ExtraLimits...))
			}
			if rt.Cost > 1 {
				cost := rt.Cost
				opts = append(opts, httplimit.WithCost(func(*http.Request) int { return cost }))
			}
			opts = append(opts, httplimit.WithWait(rt.Wait), httplimit.WithDryRun(rt.DryRun))
			mw, err := httplimit.Build(lim, limit, keyFunc(rt.Key, ipOpts), opts...)
			if err != nil {
				return nil, fmt.Errorf("routes[%d] (%s): %w", i, rt.Pattern, err)
			}
			h = mw(h)
		}
		if rt.Auth {
			// Authentication runs first, so the limiter sees the tenant.
			h = authenticate(tenants, h)
		}
		mux.Handle(rt.Pattern, h)
	}

	a.handler = mux
	if ba := cfg.BeforeAuth; ba != nil {
		lim, err := engine(ba.Penalty)
		if err != nil {
			return nil, fmt.Errorf("before_auth: %w", err)
		}
		skip := map[string]bool{}
		for _, p := range ba.SkipPaths {
			skip[p] = true
		}
		opts := append([]httplimit.Option(nil), common...)
		opts = append(opts, httplimit.WithSkip(func(r *http.Request) bool { return skip[r.URL.Path] }))
		mw, err := httplimit.Build(lim, ba.Limit, keyfunc.IP(ipOpts...), opts...)
		if err != nil {
			return nil, fmt.Errorf("before_auth: %w", err)
		}
		a.handler = mw(mux)
	}
	return a, nil
}

// keyFunc builds a route's key from its dimensions.
func keyFunc(dims []string, ipOpts []keyfunc.IPOption) keyfunc.Func {
	fns := make([]keyfunc.Func, 0, len(dims))
	for _, d := range dims {
		switch d {
		case "ip":
			fns = append(fns, keyfunc.IP(ipOpts...))
		case "tenant":
			fns = append(fns, keyfunc.TenantValue(tenantKey{}))
		case "route":
			fns = append(fns, keyfunc.Route())
		case "global":
			fns = append(fns, keyfunc.Static("global"))
		}
	}
	if len(fns) == 1 {
		return fns[0]
	}
	return keyfunc.Join(fns...)
}

// planLimit returns the limit of the authenticated tenant's plan.
func planLimit(r *http.Request) (core.Limit, error) {
	l, ok := r.Context().Value(planKey{}).(core.Limit)
	if !ok {
		return core.Limit{}, fmt.Errorf("no authenticated tenant: %w", keyfunc.ErrNoKey)
	}
	return l, nil
}

// tenantInfo is what an API key stands for.
type tenantInfo struct {
	name string
	plan core.Limit
}

// authenticate resolves the request's API key (Authorization: Bearer <key>,
// or X-API-Key) to its tenant and plan, and refuses requests without a
// known key. A real service verifies credentials properly; the point here
// is where the tenant comes from: a value the client cannot choose.
func authenticate(keys map[string]tenantInfo, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-API-Key")
		if auth := r.Header.Get("Authorization"); strings.HasPrefix(auth, "Bearer ") {
			key = strings.TrimPrefix(auth, "Bearer ")
		}
		t, ok := keys[key]
		if key == "" || !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			http.Error(w, http.StatusText(http.StatusUnauthorized), http.StatusUnauthorized)
			return
		}
		ctx := context.WithValue(r.Context(), tenantKey{}, t.name)
		ctx = context.WithValue(ctx, planKey{}, t.plan)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// endpoint stands in for the service's real handlers.
func endpoint(pattern string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if t, ok := r.Context().Value(tenantKey{}).(string); ok {
			fmt.Fprintf(w, "%s: ok (tenant %s)\n", pattern, t)
			return
		}
		fmt.Fprintf(w, "%s: ok\n", pattern)
	})
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
