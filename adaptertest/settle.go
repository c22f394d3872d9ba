package adaptertest

import (
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// Request fields that choose how a route's handler answers (see [Answer]).
const (
	// StatusHeader holds the status the route's handler answers with.
	StatusHeader = "X-Adaptertest-Status"
	// ErrorHeader, set to "1", makes the route's handler answer through
	// the framework's error handling: an adapter whose framework has an
	// error return (echo, fiber) returns its HTTP error with the status;
	// the others write the status.
	ErrorHeader = "X-Adaptertest-Error"
	// costHeader holds the cost the route's handler records with
	// policy.SetCost, in the scenarios that charge by the response.
	costHeader = "X-Adaptertest-Cost"
)

// Answer returns the status a route's handler answers c with: the
// [StatusHeader] field, or 200; and whether it answers through the
// framework's error handling ([ErrorHeader]).
func Answer(c Call) (status int, asError bool) {
	status = http.StatusOK
	if n, err := strconv.Atoi(c.Header(StatusHeader)); err == nil && n >= 200 && n <= 599 {
		status = n
	}
	return status, c.Header(ErrorHeader) == "1"
}

// settleScenarios are the conformance cases of charging by the response
// (WithChargeIf, WithFinalCost).
func settleScenarios() []Scenario {
	login := []Route{{Method: "POST", Pattern: "/login", Handler: func(c Call) {
		if c.Header(doHeader) == "panic" {
			panic("adaptertest: the handler panics")
		}
	}}}
	failures := func(status int) bool { return status >= 400 && status < 500 }
	status := func(code int) Request { return post("/login", StatusHeader, strconv.Itoa(code)) }
	metered := []Route{{Method: "POST", Pattern: "/complete", Handler: func(c Call) {
		if n, err := strconv.Atoi(c.Header(costHeader)); err == nil {
			policy.SetCost(c.Context, n)
		}
	}}}
	cost := func(n int, kv ...string) Request {
		return post("/complete", append([]string{costHeader, strconv.Itoa(n)}, kv...)...)
	}
	recorded := func(_ Call, r policy.Response) int {
		if n, ok := r.Cost(); ok {
			return n
		}
		return r.Reserved
	}
	return []Scenario{
		{
			// The status is known before the fields are sent: they say
			// what the bucket holds after the refund or the charge.
			Name:    "charge only failures, with fields after settling",
			Limiter: Frozen,
			Use:     &Middleware{Limit: core.PerMinute(2), Key: keyfunc.Static("login"), ChargeIf: failures},
			Routes:  login,
			Steps: []Step{
				{Request: status(200), Want: Want{Status: 200, Header: legacy(2, 2, 0), Body: OK}},
				{Request: status(204), Want: Want{Status: 204, Header: legacy(2, 2, 0)}},
				{Request: status(401), Want: Want{Status: 401, Header: legacy(2, 1, 30)}},
				{Request: post("/login", doHeader, "panic"), Want: Want{Status: 500}}, // not a failure of the client's: refunded
				{Request: status(500), Want: Want{Status: 500, Header: legacy(2, 1, 30)}},
				{Request: status(403), Want: Want{Status: 403, Header: legacy(2, 0, 60)}},
				{Request: status(200), Want: Want{Status: 429, Header: with(legacy(2, 0, 60), "Retry-After", "30"), Body: tooMany}},
			},
		},
		{
			Name:    "a failure the framework's error handling answers is charged",
			Limiter: Frozen,
			Use:     &Middleware{Limit: core.PerMinute(1), Key: keyfunc.Static("login"), ChargeIf: failures},
			Routes:  login,
			Steps: []Step{
				{Request: post("/login", StatusHeader, "503", ErrorHeader, "1"), Want: Want{Status: 503}},
				{Request: post("/login", StatusHeader, "401", ErrorHeader, "1"), Want: Want{Status: 401}},
				{Request: status(200), Want: Want{Status: 429}},
			},
		},
		{
			Name:    "the final cost the handler records is charged",
			Limiter: Frozen,
			Use:     &Middleware{Limit: core.PerMinute(10), Key: keyfunc.Static("llm"), FinalCost: recorded},
			Routes:  metered,
			Steps: []Step{
				{Request: cost(6), Want: Want{Status: 200, Body: OK}},
				{Request: cost(0), Want: Want{Status: 200, Body: OK}}, // refunded whole
				{Request: cost(3), Want: Want{Status: 200, Body: OK}},
				{Request: post("/complete"), Want: Want{Status: 200, Body: OK}}, // none recorded: the estimate
				{Request: cost(1), Want: Want{Status: 429}},
			},
		},
		{
			Name:    "a final cost out of range keeps the estimate",
			Limiter: Frozen,
			Use:     &Middleware{Limit: core.PerMinute(2), Key: keyfunc.Static("llm"), FinalCost: recorded},
			Routes:  metered,
			Steps: []Step{
				{Request: cost(1000), Want: Want{Status: 200, Body: OK}},
				{Request: cost(1), Want: Want{Status: 200, Body: OK}},
				{Request: cost(1), Want: Want{Status: 429}},
			},
		},
		{
			Name:    "the final cost is charged only when the status is",
			Limiter: Frozen,
			Use:     &Middleware{Limit: core.PerMinute(4), Key: keyfunc.Static("llm"), FinalCost: recorded, ChargeIf: func(s int) bool { return s < 500 }},
			Routes:  metered,
			Steps: []Step{
				{Request: cost(4, StatusHeader, "502"), Want: Want{Status: 502}},
				{Request: cost(4), Want: Want{Status: 200, Body: OK}},
				{Request: cost(1), Want: Want{Status: 429}},
			},
		},
	}
}

// post is a POST request for path with header fields given as name,
// value pairs.
func post(path string, kv ...string) Request {
	r := req(path, kv...)
	r.Method = http.MethodPost
	return r
}
