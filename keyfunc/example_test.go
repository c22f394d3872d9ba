package keyfunc_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/sluicehq/sluice/keyfunc"
)

// stdRequest shows what an adapter does: it wraps the native request in a
// one-pointer struct that implements keyfunc.Request.
type stdRequest struct{ r *http.Request }

func (s stdRequest) Header(name string) string {
	v := s.r.Header.Values(name)
	if len(v) == 1 {
		return v[0]
	}
	return strings.Join(v, ", ")
}

func (s stdRequest) RemoteAddr() string { return s.r.RemoteAddr }
func (s stdRequest) Method() string     { return s.r.Method }
func (s stdRequest) Route() string      { return s.r.Pattern }
func (s stdRequest) Value(key any) any  { return s.r.Context().Value(key) }

// serve sends req through a ServeMux that has route registered, and prints
// the key that fn extracts inside the handler.
func serve(route string, fn keyfunc.Func, req *http.Request) {
	mux := http.NewServeMux()
	mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
		key, err := fn(stdRequest{r})
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Println(key)
	})
	mux.ServeHTTP(httptest.NewRecorder(), req)
}

func ExampleIP() {
	key := keyfunc.IP()

	req := httptest.NewRequest("GET", "/search", nil)
	req.RemoteAddr = "203.0.113.7:51234"
	req.Header.Set("X-Forwarded-For", "198.51.100.1") // ignored: no proxy is trusted
	serve("/search", key, req)

	req = httptest.NewRequest("GET", "/search", nil)
	req.RemoteAddr = "[2001:db8:1:2:aaaa::1]:51234"
	serve("/search", key, req)
	// Output:
	// ip:203.0.113.7
	// ip:2001:db8:1:2::/64
}

func ExampleIP_trustedProxy() {
	key := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"))

	// The load balancer at 10.0.0.2 appended the address it saw. The client
	// put a made-up entry first, which is never reached.
	req := httptest.NewRequest("GET", "/search", nil)
	req.RemoteAddr = "10.0.0.2:40000"
	req.Header.Set("X-Forwarded-For", "192.0.2.99, 203.0.113.7")
	serve("/search", key, req)

	// A client that connects directly is keyed by its own address.
	req = httptest.NewRequest("GET", "/search", nil)
	req.RemoteAddr = "198.51.100.4:40000"
	req.Header.Set("X-Forwarded-For", "192.0.2.99")
	serve("/search", key, req)
	// Output:
	// ip:203.0.113.7
	// ip:198.51.100.4
}

func ExampleJoin() {
	// Behind a gateway that sets X-Tenant-ID, limit each tenant on each route.
	key := keyfunc.Join(keyfunc.Tenant("X-Tenant-ID"), keyfunc.Route())

	req := httptest.NewRequest("GET", "/users/42", nil)
	req.Header.Set("X-Tenant-ID", "acme")
	serve("GET /users/{id}", key, req)

	req = httptest.NewRequest("GET", "/users/42", nil)
	serve("GET /users/{id}", key, req)
	// Output:
	// tenant:acme|route:GET /users/{id}
	// error: keyfunc: no key: tenant header X-Tenant-ID is missing or empty
}

type exampleTenantKey struct{}

func ExampleFirst() {
	// Authenticated requests are limited per tenant, anonymous ones per
	// client address.
	key := keyfunc.First(keyfunc.TenantValue(exampleTenantKey{}), keyfunc.IP())

	req := httptest.NewRequest("GET", "/search", nil)
	req.RemoteAddr = "203.0.113.7:51234"
	// An authentication middleware would store the tenant like this.
	req = req.WithContext(context.WithValue(req.Context(), exampleTenantKey{}, "acme"))
	serve("/search", key, req)

	req = httptest.NewRequest("GET", "/search", nil)
	req.RemoteAddr = "203.0.113.7:51234"
	serve("/search", key, req)
	// Output:
	// tenant:acme
	// ip:203.0.113.7
}
