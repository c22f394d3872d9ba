package adaptertest

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
)

// deniedProblem is the problem body of a request on a deny list.
const deniedProblem = `{"type":"` + policy.DenyListProblem + `","title":"Forbidden","status":403,` +
	`"detail":"The request's key or address is on a deny list."}`

// listScenarios are the conformance cases of allow and deny lists and of
// run-time overrides (WithAllow, WithDeny, WithListClientIP,
// WithOverrides).
func listScenarios() []Scenario {
	tenant := func(name string, kv ...string) Request {
		return req("/items/1", append([]string{"X-Tenant", name}, kv...)...)
	}
	withLocal := func(m *Middleware) *Middleware {
		m.AllowEntries = []string{"tenant:internal", "10.0.0.0/8"}
		m.DenyEntries = []string{"tenant:evil", "203.0.113.0/24", "10.6.6.6"}
		m.ListClientIP = []keyfunc.IPOption{keyfunc.TrustProxies("192.0.2.0/24")}
		return m
	}
	problem := &Middleware{Limit: core.PerMinute(1), Key: keyfunc.Tenant("X-Tenant"), ProblemJSON: true}
	handled := &Middleware{Limit: core.PerMinute(1), Key: keyfunc.Tenant("X-Tenant"), Error: func(err error) Reply {
		if errors.Is(err, policy.ErrDenyList) {
			return Reply{Status: 451, ContentType: textPlain, Body: "listed\n"}
		}
		return Reply{Status: 500, ContentType: textPlain, Body: "unexpected\n"}
	}}

	var ov *overrides.Set // made with the scenario's limiter
	withOverrides := func(tb testing.TB) *core.Limiter {
		tb.Helper()
		lim := Frozen(tb)
		var err error
		if ov, err = overrides.New(lim, "plans"); err != nil {
			tb.Fatalf("overrides.New() = %v", err)
		}
		tb.Cleanup(func() { _ = ov.Close() })
		ctx := tb.Context()
		for key, text := range map[string]string{"tenant:acme": "3/m name pro", "tenant:mallory": "deny", "tenant:vip": "allow", "198.51.100.0/24": "deny"} {
			o, err := overrides.Parse(text)
			if err == nil {
				err = ov.Set(ctx, key, o)
			}
			if err != nil {
				tb.Fatalf("Overrides.Set(%q, %q) = %v", key, text, err)
			}
		}
		return lim
	}

	return []Scenario{
		{
			Name:    "lists read the client as the key function does, trusted proxies included",
			Limiter: Memory,
			Routes: []Route{{Method: "GET", Pattern: "/items/{id}", Middleware: &Middleware{
				Limit: core.PerMinute(1), Key: keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8")),
				DenyEntries: []string{"203.0.113.7"}, AllowEntries: []string{"198.51.100.0/24"},
			}}},
			Steps: []Step{
				// Behind the trusted proxy: the forwarded client is refused.
				{Request: from("10.0.0.5:5000", "X-Forwarded-For", "203.0.113.7"), Want: Want{Status: 403, Absent: allFields}},
				{Request: from("10.0.0.5:5000", "X-Forwarded-For", "192.0.2.1, 203.0.113.7"), Want: Want{Status: 403}},
				{Request: from("203.0.113.7:5000"), Want: Want{Status: 403}},
				// From an untrusted peer the header is not read, by the
				// key function nor by the lists.
				{Request: from("198.51.100.9:5000", "X-Forwarded-For", "203.0.113.7"), Want: Want{Status: 200, Absent: allFields}},
				{Request: from("192.0.2.20:5000", "X-Forwarded-For", "198.51.100.9"), Want: Want{Status: 200, Header: legacy(1, 0, 60)}},
				// Allowed behind the proxy, by the forwarded client.
				{Request: from("10.0.0.5:5000", "X-Forwarded-For", "198.51.100.4"), Want: Want{Status: 200, Absent: allFields}},
				{Request: from("10.0.0.5:5000", "X-Forwarded-For", "198.51.100.4"), Want: Want{Status: 200, Absent: allFields}},
				// Neither: limited as usual.
				{Request: from("10.0.0.5:5000", "X-Forwarded-For", "192.0.2.99"), Want: Want{Status: 200, Header: legacy(1, 0, 60)}},
				{Request: from("10.0.0.5:5000", "X-Forwarded-For", "192.0.2.99"), Want: Want{Status: 429}},
			},
		},
		{
			Name:    "allow and deny lists by key and client address",
			Limiter: Memory,
			Routes: []Route{
				{Method: "GET", Pattern: "/items/{id}", Middleware: withLocal(problem)},
				{Method: "GET", Pattern: "/plain", Middleware: withLocal(&Middleware{Limit: core.PerMinute(1), Key: keyfunc.Tenant("X-Tenant")})},
				{Method: "GET", Pattern: "/handled", Middleware: withLocal(handled)},
			},
			Steps: []Step{
				// Allowed: no decision, no field, no bucket spent.
				{Request: tenant("internal"), Want: Want{Status: 200, Absent: allFields, Body: OK}},
				{Request: tenant("internal"), Want: Want{Status: 200, Absent: allFields, Body: OK}},
				{Request: from("10.1.2.3:5000", "X-Tenant", "a"), Want: Want{Status: 200, Absent: allFields}},
				{Request: from("10.1.2.3:5000", "X-Tenant", "a"), Want: Want{Status: 200, Absent: allFields}},
				// Denied: 403 with its own problem type, no field.
				{Request: tenant("evil"), Want: Want{Status: 403, Absent: allFields, ContentType: problemJSON, Body: deniedProblem}},
				{Request: from("203.0.113.9:5000", "X-Tenant", "b"), Want: Want{Status: 403, Absent: allFields, Body: deniedProblem}},
				// A deny entry wins over an allow entry.
				{Request: from("10.6.6.6:5000", "X-Tenant", "b"), Want: Want{Status: 403}},
				// Through a trusted proxy, by the forwarded address only.
				{Request: from("192.0.2.5:5000", "X-Tenant", "c", "X-Forwarded-For", "203.0.113.77"), Want: Want{Status: 403}},
				{Request: from("198.51.100.1:5000", "X-Tenant", "c", "X-Forwarded-For", "203.0.113.77"), Want: Want{Status: 200}},
				// Not listed: limited as usual.
				{Request: tenant("d"), Want: Want{Status: 200, Header: legacy(1, 0, 60)}},
				{Request: tenant("d"), Want: Want{Status: 429}},
				// The default plain answer, and an error handler that tells
				// a listed request apart.
				{Request: Request{Path: "/plain", Header: tenant("evil").Header}, Want: Want{Status: 403, ContentType: textPlain, Body: "Forbidden\n"}},
				{Request: Request{Path: "/handled", Header: tenant("evil").Header}, Want: Want{Status: 451, Body: "listed\n"}},
				{Request: Request{Path: "/handled"}, Want: Want{Status: 500, Body: "unexpected\n"}},
			},
		},
		{
			Name:    "run-time overrides: limits, allow and deny entries",
			Limiter: withOverrides,
			Use: &Middleware{Limit: core.PerMinute(1), Key: keyfunc.Tenant("X-Tenant"), Headers: policy.HeadersBoth,
				Overrides: func() *overrides.Set { return ov }},
			Routes: []Route{{Method: "GET", Pattern: "/items/{id}"}},
			Steps: []Step{
				{Request: tenant("acme"), Want: Want{Status: 200, Header: with(legacy(3, 2, 20), "RateLimit-Policy", `"pro";q=3;w=60`)}},
				{Request: tenant("acme"), Want: Want{Status: 200, Header: legacy(3, 1, 40)}},
				{Request: tenant("acme"), Want: Want{Status: 200, Header: legacy(3, 0, 60)}},
				{Request: tenant("acme"), Want: Want{Status: 429, Header: with(legacy(3, 0, 60), "Retry-After", "20")}},
				{Request: tenant("other"), Want: Want{Status: 200, Header: legacy(1, 0, 60)}},
				{Request: tenant("mallory"), Want: Want{Status: 403, Absent: allFields, ContentType: textPlain, Body: "Forbidden\n"}},
				{Request: tenant("vip"), Want: Want{Status: 200, Absent: allFields}},
				{Request: tenant("vip"), Want: Want{Status: 200, Absent: allFields}},
				{Request: from("198.51.100.7:5000", "X-Tenant", "e"), Want: Want{Status: 403}},
			},
		},
	}
}
