package adaptertest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/keyfunc"
)

// ViewRequest returns the request whose keyfunc.Request view [CheckView]
// checks: GET /items/7 from 203.0.113.7:1234, with X-Tenant set and
// X-Forwarded-For on two lines. Route it by the pattern "/items/{id}".
func ViewRequest() Request {
	return Request{
		Method:     "GET",
		Path:       "/items/7",
		RemoteAddr: "203.0.113.7:1234",
		Header: http.Header{
			"X-Tenant":        {"acme"},
			"X-Forwarded-For": {"198.51.100.1", "198.51.100.2, 10.0.0.1"},
		},
	}
}

// View is what an adapter's keyfunc.Request view of [ViewRequest] must
// report where the framework differs.
type View struct {
	// RemoteAddr is the peer, "203.0.113.7:1234" or "203.0.113.7".
	RemoteAddr string
	// Route is the framework's spelling of "/items/{id}".
	Route string
	// Values are request-scoped values the test stored, by key, and the
	// values Value must return; include a missing key with a nil value.
	Values map[any]any
}

// CheckView checks an adapter's view r of [ViewRequest].
func CheckView(t *testing.T, r keyfunc.Request, want View) {
	t.Helper()
	for _, tc := range []struct{ name, got, want string }{
		{"Header(X-Tenant)", r.Header("X-Tenant"), "acme"},
		{"Header(x-tenant)", r.Header("x-tenant"), "acme"},
		{"Header(X-Forwarded-For)", r.Header("X-Forwarded-For"), "198.51.100.1, 198.51.100.2, 10.0.0.1"},
		{"Header(X-Missing)", r.Header("X-Missing"), ""},
		{"RemoteAddr()", r.RemoteAddr(), want.RemoteAddr},
		{"Method()", r.Method(), "GET"},
		{"Route()", r.Route(), want.Route},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	for key, v := range want.Values {
		if got := r.Value(key); got != v {
			t.Errorf("Value(%#v) = %#v, want %#v", key, got, v)
		}
	}
}

// ViewAllocs reports the average allocations of making a view with mk and
// reading a header, the method, the route and a missing value through it,
// and separately of making one and reading its peer address.
func ViewAllocs(mk func() keyfunc.Request) (calls, remoteAddr float64) {
	type missing struct{}
	calls = testing.AllocsPerRun(100, func() {
		r := mk()
		_ = r.Header("X-Tenant")
		_ = r.Method()
		_ = r.Route()
		_ = r.Value(missing{})
	})
	remoteAddr = testing.AllocsPerRun(100, func() { _ = mk().RemoteAddr() })
	return calls, remoteAddr
}

// BenchHTTP sends GET /items/7 from 203.0.113.7:1234 through h b.N times,
// with a writer that discards the answer, reporting allocations.
func BenchHTTP(b *testing.B, h http.Handler) {
	r := httptest.NewRequest("GET", "/items/7", nil)
	r.RemoteAddr = "203.0.113.7:1234"
	w := discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
}

// discard is a ResponseWriter that keeps nothing but its header map.
type discard struct{ h http.Header }

func (d discard) Header() http.Header       { return d.h }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// KeyRequest returns the request the key-extraction benchmarks serve: GET
// /items/42 from 203.0.113.7:41234, with X-Tenant and Authorization set and
// no forwarding header. Route it by the pattern "/items/{id}".
func KeyRequest() Request {
	return Request{
		Method:     "GET",
		Path:       "/items/42",
		RemoteAddr: "203.0.113.7:41234",
		Header:     http.Header{"X-Tenant": {"acme"}, "Authorization": {"Bearer abc"}},
	}
}

// BenchKey measures extracting a tenant + route + IP key through an
// adapter's view of [KeyRequest], the view included: view returns it, as
// the middleware builds it once per request. Call BenchKey from the route's
// handler, while the framework's context is live: frameworks recycle it
// afterwards.
func BenchKey(b *testing.B, view func() keyfunc.Request) {
	key := keyfunc.Join(keyfunc.Tenant("X-Tenant"), keyfunc.Route(), keyfunc.IP())
	b.ReportAllocs()
	for b.Loop() {
		k, err := key(view())
		if err != nil {
			b.Fatal(err)
		}
		if k == "" {
			b.Fatal("empty key")
		}
	}
}
