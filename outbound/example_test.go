package outbound_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/outbound"
)

// An upstream answers the first call 429 with Retry-After: 30. The budget
// pauses every replica's calls to it for 30 s: the next call fails at
// once, unsent. (A NewMemory limiter keeps the example self-contained; a
// fleet passes core.New(rdb) to share its budget and pauses in Redis.)
func ExampleBudget_Transport() {
	calls := 0
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls++
		w.Header().Set("RateLimit-Policy", `"api";q=100;w=60`)
		if calls == 1 {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer upstream.Close()

	lim, err := core.NewMemory()
	if err != nil {
		panic(err)
	}
	budget, err := outbound.New(lim, core.PerMinute(600), outbound.WithName("api"), outbound.WithFailFast(true))
	if err != nil {
		panic(err)
	}
	defer budget.Close()
	client := &http.Client{Transport: budget.Transport(outbound.Host(), nil)}

	resp, err := client.Get(upstream.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("first call:", resp.StatusCode)

	_, err = client.Get(upstream.URL)
	var limited *outbound.LimitedError
	if errors.As(err, &limited) {
		fmt.Println("second call refused, paused:", limited.Paused, "for about", limited.RetryAfter.Round(time.Second))
	}
	fmt.Println("the upstream saw", calls, "call")
	fmt.Println("limit now:", budget.Limit("host:"+upstream.Listener.Addr().String()))
	// Output:
	// first call: 429
	// second call refused, paused: true for about 30s
	// the upstream saw 1 call
	// limit now: 98/1m0s burst 2
}
