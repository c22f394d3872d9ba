package adaptertest

import (
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// paths is the conformance case of a path of keys (WithPath): an
// organisation's quota, its team's rate, the user's burst. A user's
// denial names the user level in the fields and the problem, and charges
// nothing at the organisation, which shows two requests spent, not three.
func paths() Scenario {
	org := func(headers ...string) Request {
		return req("/items/1", append([]string{"X-Org", "acme"}, headers...)...)
	}
	alice := org("X-Team", "eng", "X-User", "alice")
	return Scenario{
		Name:    "a path of keys decided as one",
		Limiter: Frozen,
		Use: &Middleware{
			Limit: core.PerHour(100).WithName("org-hourly"), Key: keyfunc.Header("X-Org"),
			Headers: policy.HeadersIETF, ProblemJSON: true, Scope: "api",
			PathRoot: "org",
			Path: []policy.PathLevel{
				{Name: "team", Key: keyfunc.Header("X-Team"), Limits: []core.Limit{core.PerMinute(100)}},
				{Name: "user", Key: keyfunc.Header("X-User"), Limits: []core.Limit{core.PerMinute(2)}},
			},
		},
		Routes: []Route{{Method: "GET", Pattern: "/items/{id}"}},
		Steps: []Step{
			{Request: alice, Want: Want{Status: 200, Header: map[string]string{
				"RateLimit-Policy": `"org.org-hourly";q=100;w=3600, "team.100/m";q=100;w=60, "user.2/m";q=2;w=60`,
				"RateLimit":        `"user.2/m";r=1;t=30`,
			}}},
			{Request: alice, Want: Want{Status: 200, Header: map[string]string{"RateLimit": `"user.2/m";r=0;t=30`}}},
			{Request: alice, Want: Want{Status: 429, Header: map[string]string{"RateLimit": `"user.2/m";r=0;t=30`, "Retry-After": "30"},
				ContentType: problemJSON,
				Body:        `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Rate limit exceeded; retry after 30 s.","violated-policies":["user.2/m"]}`}},
			{Request: org("X-Team", "eng", "X-User", "bob"), Want: Want{Status: 200, Header: map[string]string{"RateLimit": `"user.2/m";r=1;t=30`}}},
			// The organisation alone: three admitted, the denial not charged.
			{Request: org(), Want: Want{Status: 200, Header: map[string]string{
				"RateLimit-Policy": `"org.org-hourly";q=100;w=3600`,
				"RateLimit":        `"org.org-hourly";r=96;t=36`,
			}}},
		},
	}
}

// shared is the conformance case of a shared level (WithShare, WithClass):
// an upstream of 10 a minute whose "critical" class holds half its burst
// from the "rest". A request of the rest that would spend the reserve is a
// 429 whose problem names the reason and the class; a critical request is
// still admitted.
func shared() Scenario {
	call := func(priority string) Request {
		return req("/items/1", "X-Tenant", "acme", "X-Priority", priority)
	}
	return Scenario{
		Name:    "a shared level's classes and reserves",
		Limiter: Frozen,
		Use: &Middleware{
			Limit: core.PerMinute(10), Key: keyfunc.Static("upstream"),
			ProblemJSON: true, Scope: "api",
			PathRoot:   "upstream",
			Path:       []policy.PathLevel{{Name: "tenant", Key: keyfunc.Header("X-Tenant"), Limits: []core.Limit{core.PerMinute(100)}}},
			Share:      &core.Share{Classes: []core.Class{{Name: "critical", Reserve: 0.5}, {Name: "rest"}}},
			ShareLevel: "upstream",
			Class: func(r keyfunc.Request) (string, error) {
				return r.Header("X-Priority"), nil
			},
		},
		Routes: []Route{{Method: "GET", Pattern: "/items/{id}"}},
		Steps: []Step{
			{Request: call("rest"), Want: Want{Status: 200}},
			{Request: call("rest"), Want: Want{Status: 200}},
			{Request: call("rest"), Want: Want{Status: 200}},
			{Request: call("rest"), Want: Want{Status: 200}},
			{Request: call("rest"), Want: Want{Status: 200}},
			// Five left: the rest may not take the critical half.
			{Request: call("rest"), Want: Want{Status: 429, ContentType: problemJSON,
				Body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Rate limit exceeded; retry after 6 s.","violated-policies":["upstream.10/m"],"reason":"class reserve","class":"rest"}`}},
			{Request: call("critical"), Want: Want{Status: 200}},
			{Request: call(""), Want: Want{Status: 429}}, // no class: the last
			{Request: call("gold"), Want: Want{Status: 500}},
		},
	}
}
