package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
)

// A client hears it is close to its limit before the first 429: the
// responses of a tenant that has used 80% of its budget carry
// X-RateLimit-Warning, and the limiter's handler is told once.
func ExampleWithWarning() {
	lim, err := core.NewMemory(core.WithThresholdHandler(func(ev core.ThresholdEvent) {
		fmt.Printf("event: %s crossed %.0f%%, %d left\n", ev.Key, ev.Threshold*100, ev.Remaining)
	}))
	if err != nil {
		panic(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})
	handler := httplimit.New(lim, core.PerMinute(5), keyfunc.Tenant("X-Tenant"), httplimit.WithWarning(0.8))(api)

	for range 6 {
		req := httptest.NewRequest("GET", "/orders", nil)
		req.Header.Set("X-Tenant", "acme")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Printf("%d remaining %s warning %q\n", rec.Code, rec.Header().Get("X-RateLimit-Remaining"), rec.Header().Get("X-RateLimit-Warning"))
	}
	// Output:
	// 200 remaining 4 warning ""
	// 200 remaining 3 warning ""
	// 200 remaining 2 warning ""
	// event: tenant:acme crossed 80%, 1 left
	// 200 remaining 1 warning "80"
	// 200 remaining 0 warning "80"
	// 429 remaining 0 warning ""
}
