package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// Answers shared by the scenarios.
const (
	textPlain   = "text/plain; charset=utf-8"
	problemJSON = "application/problem+json"
	tooMany     = "Too Many Requests\n"
)

// Rate-limit fields: the legacy ones, all but Retry-After, and all.
var (
	legacyFields    = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
	rateLimitFields = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy"}
	allFields       = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy", "Retry-After"}
)

// Scenarios returns the conformance table. Each call returns new values, so
// callers may change what they get.
func Scenarios() []Scenario {
	items := []Route{{Method: "GET", Pattern: "/items/{id}"}}
	static := func(l core.Limit) *Middleware { return &Middleware{Limit: l, Key: keyfunc.Static("all")} }
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	return append(append([]Scenario{
		{
			Name:    "allow then deny with exact headers",
			Limiter: Frozen,
			Use:     static(core.PerMinute(2)),
			Routes:  items,
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 200, Header: legacy(2, 1, 30), Absent: []string{"Retry-After"}, Body: OK}},
				{Request: get("/items/2"), Want: Want{Status: 200, Header: legacy(2, 0, 60), Absent: []string{"Retry-After"}, Body: OK}},
				{Request: get("/items/3"), Want: Want{Status: 429, Header: with(legacy(2, 0, 60), "Retry-After", "30"), ContentType: textPlain, Body: tooMany}},
			},
		},
		{
			Name:    "Retry-After is never earlier than the real wait",
			Limiter: Frozen,
			Use:     static(core.Limit{Rate: 1, Period: 1500 * time.Millisecond, Burst: 1}),
			Routes:  items,
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 200, Header: legacy(1, 0, 2)}},
				{Request: get("/items/1"), Want: Want{Status: 429, Header: map[string]string{"Retry-After": "2"}}},
			},
		},
		severalLimits(),
		canary(),
		warning("legacy"),
		warning("none"),
		shadow(),
		perRoute(),
		scopes(),
		nativeKey(),
		tenantPlans(),
		paths(),
		shared(),
		customKey(),
		{
			Name:    "skipped requests pass without headers",
			Limiter: Memory,
			Use: &Middleware{
				Limit: core.PerMinute(1), Key: keyfunc.Static("all"),
				Skip: func(c Call) bool { return c.Path == "/healthz" },
			},
			Routes: []Route{{Method: "GET", Pattern: "/healthz"}, {Method: "GET", Pattern: "/items/{id}"}},
			Steps: []Step{
				{Request: get("/healthz"), Want: Want{Status: 200, Absent: rateLimitFields, Body: OK}},
				{Request: get("/items/1"), Want: Want{Status: 200, Header: legacy(1, 0, 60)}},
				{Request: get("/items/1"), Want: Want{Status: 429}},
				{Request: get("/healthz"), Want: Want{Status: 200, Absent: allFields, Body: OK}},
			},
		},
		{
			Name:    "dry run never blocks and writes no field",
			Limiter: Memory,
			Use:     &Middleware{Limit: core.PerMinute(1), Key: keyfunc.Static("all"), DryRun: true},
			Routes:  items,
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 200, Absent: allFields, Body: OK}},
				{Request: get("/items/1"), Want: Want{Status: 200, Absent: allFields, Body: OK}},
				{Request: get("/items/1"), Want: Want{Status: 200, Absent: allFields, Body: OK}},
			},
		},
		{
			Name:    "dry run lets through what it cannot decide, and does not wait",
			Limiter: Memory,
			Routes: []Route{
				{Method: "GET", Pattern: "/tenant", Middleware: &Middleware{Limit: core.PerMinute(1), Key: keyfunc.Tenant("X-Tenant"), DryRun: true}},
				{Method: "GET", Pattern: "/cost", Middleware: &Middleware{Limit: core.PerMinute(1), Key: keyfunc.Static("cost"), DryRun: true, Cost: func(Call) int { return 0 }}},
				{Method: "GET", Pattern: "/wait", Middleware: &Middleware{Limit: core.PerHour(1), Key: keyfunc.Static("wait"), DryRun: true, Wait: time.Hour}},
			},
			Steps: []Step{
				{Request: get("/tenant"), Want: Want{Status: 200, Absent: allFields, Body: OK}},
				{Request: get("/cost"), Want: Want{Status: 200, Absent: allFields, Body: OK}},
				{Request: get("/wait"), Want: Want{Status: 200, Absent: allFields, Body: OK}},
				{Request: get("/wait"), Want: Want{Status: 200, Absent: allFields, Body: OK}}, // would wait an hour
			},
		},
		{
			Name:    "dry run with the store down under FailClosed",
			Limiter: DownRedis(core.FailClosed),
			Use:     &Middleware{Limit: core.PerMinute(1), Key: keyfunc.Static("all"), DryRun: true},
			Routes:  items,
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 200, Absent: allFields, Body: OK}},
			},
		},
		{
			Name:    "wait within the bound, deny beyond it",
			Limiter: Memory,
			Routes: []Route{
				{Method: "GET", Pattern: "/smooth", Middleware: &Middleware{
					Limit: core.PerSecond(20).WithBurst(1), Key: keyfunc.Static("smooth"), Wait: 500 * time.Millisecond,
				}},
				{Method: "GET", Pattern: "/slow", Middleware: &Middleware{
					Limit: core.PerSecond(1), Key: keyfunc.Static("slow"), Wait: 500 * time.Millisecond,
				}},
			},
			Steps: []Step{
				{Request: get("/smooth"), Want: Want{Status: 200, Body: OK}},
				{Request: get("/smooth"), Want: Want{Status: 200, Body: OK}}, // waits about 50ms
				{Request: get("/smooth"), Want: Want{Status: 200, Body: OK}},
				{Request: get("/slow"), Want: Want{Status: 200, Body: OK}},
				{Request: get("/slow"), Want: Want{Status: 429, Header: map[string]string{"Retry-After": "1"}, Body: tooMany}},
			},
		},
		missingKey(),
		{
			Name:    "store down: local fallback keeps limiting",
			Limiter: DownRedis(core.FallbackLocal),
			Use:     static(core.PerMinute(1)),
			Routes:  items,
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 200, Body: OK}},
				{Request: get("/items/1"), Want: Want{Status: 429, Header: map[string]string{"Retry-After": "60"}, Body: tooMany}},
				{Request: get("/items/1"), Want: Want{Status: 429, Body: tooMany}},
			},
		},
		{
			Name:    "store down: fail open admits",
			Limiter: DownRedis(core.FailOpen),
			Use:     static(core.PerMinute(1)),
			Routes:  items,
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 200, Body: OK}},
				{Request: get("/items/1"), Want: Want{Status: 200, Body: OK}},
				{Request: get("/items/1"), Want: Want{Status: 200, Body: OK}},
			},
		},
		{
			Name:    "store down: fail closed refuses",
			Limiter: DownRedis(core.FailClosed),
			Use:     static(core.PerMinute(1)),
			Routes:  items,
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 503, Absent: allFields}},
				{Request: get("/items/1"), Want: Want{Status: 503}},
			},
		},
		{
			Name:    "forwarding headers are ignored by default",
			Limiter: Memory,
			Use:     &Middleware{Limit: core.PerMinute(1), Key: keyfunc.IP()},
			Routes:  items,
			Steps: []Step{
				{Request: from("10.0.0.1:5000", "X-Forwarded-For", "198.51.100.1"), Want: Want{Status: 200}},
				{Request: from("10.0.0.1:5001", "X-Forwarded-For", "198.51.100.2"), Want: Want{Status: 429}},
				{Request: from("10.0.0.1:5002", "X-Real-IP", "198.51.100.3"), Want: Want{Status: 429}},
				{Request: from("10.0.0.2:5000", "X-Forwarded-For", "198.51.100.1"), Want: Want{Status: 200}},
				// One IPv6 client holds a /64.
				{Request: from("[2001:db8:1:2::1]:5000"), Want: Want{Status: 200}},
				{Request: from("[2001:db8:1:2::abcd]:5000"), Want: Want{Status: 429}},
			},
		},
		{
			Name:    "forwarding headers count from trusted proxies",
			Limiter: Memory,
			Use:     &Middleware{Limit: core.PerMinute(1), Key: keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"))},
			Routes:  items,
			Steps: []Step{
				{Request: from("10.0.0.1:5000", "X-Forwarded-For", "198.51.100.1"), Want: Want{Status: 200}},
				{Request: from("10.0.0.1:5000", "X-Forwarded-For", "198.51.100.2"), Want: Want{Status: 200}},
				{Request: from("10.0.0.9:5000", "X-Forwarded-For", "198.51.100.1"), Want: Want{Status: 429}},
				// The field on two lines is one list; the client is the
				// rightmost address that is not a trusted proxy.
				{Request: from("10.0.0.1:5000", "X-Forwarded-For", "203.0.113.5", "X-Forwarded-For", "198.51.100.2, 10.0.0.7"), Want: Want{Status: 429}},
				// An untrusted peer is keyed by its own address.
				{Request: from("192.0.2.7:5000", "X-Forwarded-For", "198.51.100.3"), Want: Want{Status: 200}},
				{Request: from("192.0.2.7:5000", "X-Forwarded-For", "198.51.100.4"), Want: Want{Status: 429}},
			},
		},
		{
			Name:    "custom deny handler",
			Limiter: Memory,
			Use: &Middleware{
				Limit: core.PerMinute(1), Key: keyfunc.Static("all"),
				Deny: func(res core.Result) Reply {
					secs := (res.RetryAfter + time.Second - 1) / time.Second
					return Reply{Status: 429, ContentType: "application/json", Body: fmt.Sprintf(`{"retry_in":%d}`, secs)}
				},
			},
			Routes: items,
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 200}},
				{Request: get("/items/1"), Want: Want{
					Status: 429, Header: with(legacy(1, 0, 60), "Retry-After", "60"),
					ContentType: "application/json", Body: `{"retry_in":60}`,
				}},
			},
		},
		{
			Name:    "problem details",
			Limiter: Memory,
			Routes: []Route{
				{Method: "GET", Pattern: "/items/{id}", Middleware: &Middleware{Limit: core.PerMinute(1), Key: keyfunc.Static("all"), ProblemJSON: true}},
				{Method: "GET", Pattern: "/tenant", Middleware: &Middleware{Limit: core.PerMinute(1), Key: keyfunc.Tenant("X-Tenant"), ProblemJSON: true}},
			},
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 200}},
				{Request: get("/items/1"), Want: Want{
					Status: 429, Header: map[string]string{"Retry-After": "60"}, ContentType: problemJSON,
					Body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,` +
						`"detail":"Rate limit exceeded; retry after 60 s.","violated-policies":["1/m"]}`,
				}},
				{Request: get("/tenant"), Want: Want{
					Status: 400, ContentType: problemJSON, Body: `{"type":"about:blank","title":"Bad Request","status":400,"detail":"The request carries no rate-limit key."}`,
				}},
			},
		},
		{
			Name:    "IETF fields",
			Limiter: Frozen,
			Use:     &Middleware{Limit: core.PerMinute(2).WithName("api"), Key: keyfunc.Static("all"), Headers: policy.HeadersIETF},
			Routes:  items,
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 200, Header: ietf(`"api";q=2;w=60`, `"api";r=1;t=30`), Absent: legacyFields}},
				// t is when the limit has one more to give, not when it
				// is full again (X-RateLimit-Reset's 60).
				{Request: get("/items/1"), Want: Want{Status: 200, Header: ietf(`"api";q=2;w=60`, `"api";r=0;t=30`)}},
				{Request: get("/items/1"), Want: Want{
					Status: 429, Header: with(ietf(`"api";q=2;w=60`, `"api";r=0;t=30`), "Retry-After", "30"), Absent: legacyFields,
				}},
			},
		},
		{
			Name:    "legacy and IETF fields together",
			Limiter: Frozen,
			Use:     &Middleware{Limit: core.PerMinute(2), Key: keyfunc.Static("all"), Headers: policy.HeadersBoth},
			Routes:  items,
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 200, Header: with(legacy(2, 1, 30),
					"RateLimit-Policy", `"2/m";q=2;w=60`, "RateLimit", `"2/m";r=1;t=30`)}},
				{Request: get("/items/1"), Want: Want{Status: 200, Header: with(legacy(2, 0, 60),
					"RateLimit-Policy", `"2/m";q=2;w=60`, "RateLimit", `"2/m";r=0;t=30`)}},
			},
		},
		{
			Name:    "no rate-limit fields but Retry-After",
			Limiter: Memory,
			Use:     &Middleware{Limit: core.PerMinute(1), Key: keyfunc.Static("all"), Headers: policy.HeadersNone},
			Routes:  items,
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 200, Absent: allFields}},
				{Request: get("/items/1"), Want: Want{Status: 429, Header: map[string]string{"Retry-After": "60"}, Absent: rateLimitFields}},
			},
		},
		{
			Name:    "the request context ends the wait",
			Limiter: Memory,
			Use: &Middleware{
				Limit: core.Limit{Rate: 1, Period: 2 * time.Second, Burst: 1}, Key: keyfunc.Static("all"), Wait: 2 * time.Second,
			},
			Routes: items,
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 200}},
				// Without the request's context this would wait two seconds
				// and answer 200.
				{Request: get("/items/1"), HangUp: true, Want: Want{Status: 503}},
				{Request: Request{Path: "/items/1", Context: cancelled}, Want: Want{Status: 503}},
			},
		},
		{
			Name:    "cost",
			Limiter: Memory,
			Use: &Middleware{
				Limit: core.PerMinute(5), Key: keyfunc.Static("all"),
				Cost: func(c Call) int {
					n, err := strconv.Atoi(c.Header("X-Cost"))
					if err != nil {
						return 1
					}
					return n
				},
			},
			Routes: items,
			Steps: []Step{
				{Request: req("/items/1", "X-Cost", "3"), Want: Want{Status: 200, Header: legacy(5, 2, 36)}},
				{Request: req("/items/1", "X-Cost", "3"), Want: Want{Status: 429}},
				{Request: req("/items/1", "X-Cost", "2"), Want: Want{Status: 200, Header: legacy(5, 0, 60)}},
				{Request: req("/items/1", "X-Cost", "6"), Want: Want{Status: 500}}, // more than the burst
				{Request: req("/items/1", "X-Cost", "0"), Want: Want{Status: 500}},
				{Request: get("/items/1"), Want: Want{Status: 429}},
			},
		},
		{
			Name:    "extra limits",
			Limiter: Memory,
			Use:     &Middleware{Limit: core.PerSecond(100), Key: keyfunc.Static("all"), Limits: []core.Limit{core.PerMinute(2)}},
			Routes:  items,
			Steps: []Step{
				{Request: get("/items/1"), Want: Want{Status: 200, Header: legacy(2, 1, 30)}},
				{Request: get("/items/1"), Want: Want{Status: 200, Header: legacy(2, 0, 60)}},
				{Request: get("/items/1"), Want: Want{Status: 429, Header: with(legacy(2, 0, 60), "Retry-After", "30")}},
			},
		},
	}, append(settleScenarios(), listScenarios()...)...), bucketScenarios()...)
}

// severalLimits: with 10/s and 1000/h on one key, every field describes
// the limit that decided, with that limit's own numbers: the per-second
// one while it has fewer requests left, then the hourly one once it runs
// lower. The policy field describes both, and a 429's problem details
// name the limit that denied.
func severalLimits() Scenario {
	sec := core.PerSecond(10).WithName("sec")
	hour := core.PerHour(1000).WithName("hour")
	tight := core.PerHour(12).WithBurst(3).WithName("tight")
	both := `"sec";q=10;w=1, "hour";q=1000;w=3600`
	steps := []Step{
		// One request: the per-second bucket is full again in 0.1 s and
		// has its 10th request to give then.
		{Request: get("/both"), Want: Want{Status: 200, Header: with(legacy(10, 9, 1), "RateLimit-Policy", both, "RateLimit", `"sec";r=9;t=1`)}},
	}
	for i := 8; i >= 0; i-- {
		steps = append(steps, Step{Request: get("/both"), Want: Want{Status: 200, Header: with(legacy(10, i, 1), "RateLimit", `"sec";r=`+strconv.Itoa(i)+`;t=1`)}})
	}
	steps = append(steps,
		Step{Request: get("/both"), Want: Want{
			Status: 429, Header: with(legacy(10, 0, 1), "Retry-After", "1", "RateLimit-Policy", both, "RateLimit", `"sec";r=0;t=1`),
			ContentType: problemJSON,
			Body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,` +
				`"detail":"Rate limit exceeded; retry after 1 s.","violated-policies":["sec"]}`,
		}},
		// 12/h, burst 3, beside 10/s: the hourly limit has fewer left and
		// decides; one request every 5 minutes, so 15 minutes until full.
		Step{Request: get("/tight"), Want: Want{Status: 200, Header: with(legacy(3, 2, 300),
			"RateLimit-Policy", `"sec";q=10;w=1, "tight";q=3;w=900`, "RateLimit", `"tight";r=2;t=300`)}},
		Step{Request: get("/tight"), Want: Want{Status: 200, Header: with(legacy(3, 1, 600), "RateLimit", `"tight";r=1;t=300`)}},
		Step{Request: get("/tight"), Want: Want{Status: 200, Header: with(legacy(3, 0, 900), "RateLimit", `"tight";r=0;t=300`)}},
		Step{Request: get("/tight"), Want: Want{
			Status: 429, Header: with(legacy(3, 0, 900), "Retry-After", "300", "RateLimit", `"tight";r=0;t=300`),
			Body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,` +
				`"detail":"Rate limit exceeded; retry after 300 s.","violated-policies":["tight"]}`,
		}},
	)
	return Scenario{
		Name:    "several limits: every field is the deciding limit's",
		Limiter: Frozen,
		Routes: []Route{
			{Method: "GET", Pattern: "/both", Middleware: &Middleware{
				Limit: sec, Limits: []core.Limit{hour}, Key: keyfunc.Static("both"), Headers: policy.HeadersBoth, ProblemJSON: true,
			}},
			{Method: "GET", Pattern: "/tight", Middleware: &Middleware{
				Limit: sec, Limits: []core.Limit{tight}, Key: keyfunc.Static("tight"), Headers: policy.HeadersBoth, ProblemJSON: true,
			}},
		},
		Steps: steps,
	}
}

// nativeKey keys by a path parameter read from the framework's own
// request: one bucket per item.
func nativeKey() Scenario {
	byItem := &Middleware{Limit: core.PerMinute(1), Param: "id"}
	return Scenario{
		Name:    "native key: a bucket per path parameter",
		Limiter: Memory,
		Routes:  []Route{{Method: "GET", Pattern: "/items/{id}", Middleware: byItem}},
		Steps: []Step{
			{Request: get("/items/1"), Want: Want{Status: 200}},
			{Request: get("/items/1"), Want: Want{Status: 429}},
			{Request: get("/items/2"), Want: Want{Status: 200}},
		},
	}
}

func perRoute() Scenario {
	one := &Middleware{Limit: core.PerMinute(1), Key: keyfunc.Route()}
	two := &Middleware{Limit: core.PerMinute(2), Key: keyfunc.Route()}
	return Scenario{
		Name:    "per-route limits on one limiter",
		Limiter: Memory,
		Routes: []Route{
			{Method: "GET", Pattern: "/a/{id}", Middleware: one},
			{Method: "GET", Pattern: "/b/{id}", Middleware: two},
			{Method: "GET", Pattern: "/c/{id}", Middleware: one},
		},
		Steps: []Step{
			{Request: get("/a/1"), Want: Want{Status: 200, Header: legacy(1, 0, 60)}},
			// The key is the route's pattern, not its path.
			{Request: get("/a/2"), Want: Want{Status: 429}},
			{Request: get("/b/1"), Want: Want{Status: 200, Header: legacy(2, 1, 30)}},
			{Request: get("/b/2"), Want: Want{Status: 200, Header: legacy(2, 0, 60)}},
			{Request: get("/b/3"), Want: Want{Status: 429}},
			// Same limit and key function, other pattern: another bucket.
			{Request: get("/c/1"), Want: Want{Status: 200}},
			{Request: get("/a/3"), Want: Want{Status: 429}},
		},
	}
}

// scopes: middlewares with the same limit and key function keep apart
// buckets on two routes, unless they name one scope, which then covers
// several routes.
func scopes() Scenario {
	mw := func(scope string) *Middleware {
		return &Middleware{Limit: core.PerMinute(1), Key: keyfunc.Static("all"), Scope: scope}
	}
	search, export, api := mw("search"), mw("export"), mw("api")
	return Scenario{
		Name:    "scopes: a bucket per middleware, shared by name",
		Limiter: Memory,
		Routes: []Route{
			{Method: "GET", Pattern: "/search", Middleware: search},
			{Method: "GET", Pattern: "/export", Middleware: export},
			{Method: "GET", Pattern: "/api/a", Middleware: api},
			{Method: "GET", Pattern: "/api/b", Middleware: api},
		},
		Steps: []Step{
			{Request: get("/search"), Want: Want{Status: 200}},
			{Request: get("/search"), Want: Want{Status: 429}},
			// Same limit and key, another middleware: its own bucket.
			{Request: get("/export"), Want: Want{Status: 200}},
			// One scope over two routes: one bucket.
			{Request: get("/api/a"), Want: Want{Status: 200}},
			{Request: get("/api/b"), Want: Want{Status: 429}},
		},
	}
}

func tenantPlans() Scenario {
	plans := map[string]core.Limit{"free": core.PerMinute(2), "pro": core.PerMinute(5)}
	errPlan := fmt.Errorf("%w: unknown plan", keyfunc.ErrNoKey)
	sc := Scenario{
		Name:    "tenant plans",
		Limiter: Memory,
		Use: &Middleware{
			Limit: core.PerMinute(1), Key: keyfunc.Tenant("X-Tenant"),
			LimitFunc: func(c Call) (core.Limit, error) {
				if l, ok := plans[c.Header("X-Plan")]; ok {
					return l, nil
				}
				return core.Limit{}, errPlan
			},
		},
		Routes: []Route{{Method: "GET", Pattern: "/items/{id}"}},
	}
	tenant := func(name, plan string) Request { return req("/items/1", "X-Tenant", name, "X-Plan", plan) }
	sc.Steps = []Step{
		{Request: tenant("a", "free"), Want: Want{Status: 200, Header: legacy(2, 1, 30)}},
		{Request: tenant("a", "free"), Want: Want{Status: 200, Header: legacy(2, 0, 60)}},
		{Request: tenant("a", "free"), Want: Want{Status: 429, Header: map[string]string{"X-RateLimit-Limit": "2"}}},
	}
	for i := range 5 {
		sc.Steps = append(sc.Steps, Step{Request: tenant("b", "pro"), Want: Want{Status: 200, Header: map[string]string{
			"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": strconv.Itoa(4 - i),
		}}})
	}
	sc.Steps = append(sc.Steps,
		Step{Request: tenant("b", "pro"), Want: Want{Status: 429, Header: map[string]string{"X-RateLimit-Limit": "5"}}},
		Step{Request: tenant("c", "gold"), Want: Want{Status: 400, Absent: rateLimitFields}},
	)
	return sc
}

func customKey() Scenario {
	errNoAPIKey := fmt.Errorf("%w: no API key", keyfunc.ErrNoKey)
	key := func(r keyfunc.Request) (string, error) {
		k := r.Header("X-Api-Key")
		if k == "" {
			return "", errNoAPIKey
		}
		return "apikey:" + r.Method() + ":" + k, nil
	}
	return Scenario{
		Name:    "custom key function",
		Limiter: Memory,
		Use:     &Middleware{Limit: core.PerMinute(1), Key: key},
		Routes:  []Route{{Method: "GET", Pattern: "/items"}, {Method: "POST", Pattern: "/items"}},
		Steps: []Step{
			{Request: req("/items", "X-Api-Key", "k1"), Want: Want{Status: 200}},
			{Request: req("/items", "X-Api-Key", "k1"), Want: Want{Status: 429}},
			{Request: req("/items", "X-Api-Key", "k2"), Want: Want{Status: 200}},
			{Request: Request{Method: "POST", Path: "/items", Header: http.Header{"X-Api-Key": {"k1"}}}, Want: Want{Status: 200}},
			{Request: get("/items"), Want: Want{Status: 400}},
		},
	}
}

func missingKey() Scenario {
	tenant := func(onError func(error) Reply) *Middleware {
		return &Middleware{Limit: core.PerMinute(5), Key: keyfunc.Tenant("X-Tenant"), Error: onError}
	}
	return Scenario{
		Name:    "missing key",
		Limiter: Memory,
		Routes: []Route{
			{Method: "GET", Pattern: "/default", Middleware: tenant(nil)},
			{Method: "GET", Pattern: "/custom", Middleware: tenant(func(err error) Reply {
				if errors.Is(err, keyfunc.ErrNoKey) {
					return Reply{Status: 401, ContentType: textPlain, Body: "tenant required\n"}
				}
				return Reply{Status: 500, ContentType: textPlain, Body: "unexpected\n"}
			})},
		},
		Steps: []Step{
			{Request: get("/default"), Want: Want{Status: 400, Absent: allFields}},
			{Request: req("/default", "X-Tenant", "acme"), Want: Want{Status: 200, Body: OK}},
			{Request: get("/custom"), Want: Want{Status: 401, ContentType: textPlain, Body: "tenant required\n"}},
		},
	}
}

func get(path string) Request { return Request{Path: path} }

// req returns a GET request for path with header fields given as name,
// value pairs; a name may repeat.
func req(path string, kv ...string) Request {
	r := Request{Path: path, Header: http.Header{}}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	return r
}

// from returns a GET /items/1 request from peer with header fields given as
// name, value pairs.
func from(peer string, kv ...string) Request {
	r := req("/items/1", kv...)
	r.RemoteAddr = peer
	return r
}

// legacy returns the X-RateLimit fields.
func legacy(limit, remaining, reset int) map[string]string {
	return map[string]string{
		"X-RateLimit-Limit":     strconv.Itoa(limit),
		"X-RateLimit-Remaining": strconv.Itoa(remaining),
		"X-RateLimit-Reset":     strconv.Itoa(reset),
	}
}

// ietf returns the IETF fields.
func ietf(policy, limit string) map[string]string {
	return map[string]string{"RateLimit-Policy": policy, "RateLimit": limit}
}

// with returns m with the name, value pairs added.
func with(m map[string]string, kv ...string) map[string]string {
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}
