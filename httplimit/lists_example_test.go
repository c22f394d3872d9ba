package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
)

// Allow and deny lists behind a gateway: the gateway (in 10.0.0.0/8) is
// named once, and the key function and the lists share the rule, so the
// lists see each client, not the gateway.
func ExampleWithListClientIP() {
	lim, err := core.NewMemory() // core.New(rdb) to share the limit across replicas
	if err != nil {
		panic(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	gateway := keyfunc.TrustProxies("10.0.0.0/8")
	handler := httplimit.New(lim, core.PerMinute(1), keyfunc.IP(gateway),
		httplimit.WithListClientIP(gateway),
		httplimit.WithAllow("192.168.0.0/16"), // internal clients: never limited
		httplimit.WithDeny("203.0.113.0/24"),
	)(api)

	for _, client := range []string{"192.168.1.9", "192.168.1.9", "198.51.100.7", "198.51.100.7", "203.0.113.5"} {
		req := httptest.NewRequest("GET", "/api", nil)
		req.RemoteAddr = "10.0.0.5:41000" // every request comes from the gateway
		req.Header.Set("X-Forwarded-For", client)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Println(client, rec.Code)
	}
	// Output:
	// 192.168.1.9 200
	// 192.168.1.9 200
	// 198.51.100.7 200
	// 198.51.100.7 429
	// 203.0.113.5 403
}
