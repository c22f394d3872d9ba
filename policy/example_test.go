package policy_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// request is the smallest keyfunc.Request: an adapter's wraps its
// framework's request instead.
type request struct{ addr string }

func (r request) Header(string) string { return "" }
func (r request) RemoteAddr() string   { return r.addr }
func (r request) Method() string       { return "GET" }
func (r request) Route() string        { return "/search" }
func (r request) Value(any) any        { return nil }

// A policy as an adapter uses it: decide each request, then write the
// verdict's header fields and, for a Deny or a Fail, its status and body.
func Example() {
	lim, err := core.NewMemory()
	if err != nil {
		panic(err)
	}
	type opt = policy.Option[request, struct{}]
	native := func(r keyfunc.Request) request { return r.(request) }
	p, _, err := policy.New(lim, core.PerMinute(2).WithName("search"), keyfunc.IP(), native,
		opt(policy.WithHeaders[request, struct{}](policy.HeadersIETF)))
	if err != nil {
		panic(err)
	}
	for range 3 {
		v := p.Decide(context.Background(), request{addr: "192.0.2.7:4711"})
		w := httptest.NewRecorder()
		v.WriteHeaders(w.Header())
		switch v.Action {
		case policy.Continue:
			fmt.Println("continue;", w.Header().Get("RateLimit"))
		case policy.Deny, policy.Fail:
			_, body := v.Body()
			fmt.Printf("%d %q; retry after %ss\n", v.Status, body, w.Header().Get("Retry-After"))
		}
	}
	// Output:
	// continue; "search";r=1;t=30
	// continue; "search";r=0;t=30
	// 429 "Too Many Requests\n"; retry after 30s
}
