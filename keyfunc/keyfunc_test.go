package keyfunc_test

import (
	"errors"
	"fmt"
	"net/textproto"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/keyfunc"
)

// fakeRequest is a keyfunc.Request backed by plain fields.
type fakeRequest struct {
	headers map[string]string // canonical names
	remote  string
	method  string
	route   string
	values  map[any]any
}

func (r *fakeRequest) Header(name string) string {
	return r.headers[textproto.CanonicalMIMEHeaderKey(name)]
}
func (r *fakeRequest) RemoteAddr() string { return r.remote }
func (r *fakeRequest) Method() string     { return r.method }
func (r *fakeRequest) Route() string      { return r.route }
func (r *fakeRequest) Value(key any) any  { return r.values[key] }

// req returns a request from peer with the given header names and values.
// An empty value leaves the header out.
func req(peer string, headers ...string) *fakeRequest {
	r := &fakeRequest{remote: peer, method: "GET", headers: map[string]string{}}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] != "" {
			r.headers[textproto.CanonicalMIMEHeaderKey(headers[i])] = headers[i+1]
		}
	}
	return r
}

// routeReq returns a request for method matched by pattern.
func routeReq(method, pattern string) *fakeRequest {
	r := req("192.0.2.1:1")
	r.method, r.route = method, pattern
	return r
}

// valueReq returns a request carrying v under key.
func valueReq(key, v any) *fakeRequest {
	r := req("192.0.2.1:1")
	r.values = map[any]any{key: v}
	return r
}

// keyCase is one call of a Func. call describes the Func and its input for
// failure messages, as in `Tenant("X-Tenant")(acme)`.
type keyCase struct {
	name    string
	call    string
	fn      keyfunc.Func
	req     *fakeRequest
	want    string
	wantErr error // nil, or an error the result must match with errors.Is
}

func runKeyCases(t *testing.T, cases []keyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Helper()
			checkKey(t, tc.call, tc.fn, tc.req, tc.want, tc.wantErr)
		})
	}
}

func checkKey(t *testing.T, call string, fn keyfunc.Func, r keyfunc.Request, want string, wantErr error) {
	t.Helper()
	got, err := fn(r)
	if wantErr != nil {
		if !errors.Is(err, wantErr) || got != "" {
			t.Errorf("%s = %q, %v, want \"\", %v", call, got, err, wantErr)
		}
		return
	}
	if err != nil || got != want {
		t.Errorf("%s = %q, %v, want %q, <nil>", call, got, err, want)
	}
}

type ctxKey struct{ name string }

var (
	userKey   = &ctxKey{"user"}
	tenantKey = &ctxKey{"tenant"}
)

type userID int64

type tenantName string

type stringer struct{ s string }

func (s *stringer) String() string { return s.s }

type panicker struct{}

func (panicker) String() string { panic("boom") }

func TestHeaderAndTenant(t *testing.T) {
	runKeyCases(t, []keyCase{
		{
			name: "header",
			call: `Header("X-API-Key")(abc)`,
			fn:   keyfunc.Header("X-API-Key"), req: req("192.0.2.1:1", "X-Api-Key", "abc"),
			want: "header:x-api-key:abc",
		},
		{
			name: "header name matched case-insensitively",
			call: `Header("x-api-key")(abc)`,
			fn:   keyfunc.Header("x-api-key"), req: req("192.0.2.1:1", "X-API-KEY", "abc"),
			want: "header:x-api-key:abc",
		},
		{
			name: "header value escaped",
			call: `Header("X-API-Key")(a|b\c)`,
			fn:   keyfunc.Header("X-API-Key"), req: req("192.0.2.1:1", "X-API-Key", `a|b\c`),
			want: `header:x-api-key:a\|b\\c`,
		},
		{
			name: "header missing",
			call: `Header("X-API-Key")()`,
			fn:   keyfunc.Header("X-API-Key"), req: req("192.0.2.1:1"),
			wantErr: keyfunc.ErrNoKey,
		},
		{
			name: "tenant",
			call: `Tenant("X-Tenant-ID")(acme)`,
			fn:   keyfunc.Tenant("X-Tenant-ID"), req: req("192.0.2.1:1", "X-Tenant-ID", "acme"),
			want: "tenant:acme",
		},
		{
			name: "tenant repeated header joined by adapter",
			call: `Tenant("X-Tenant-ID")(a, b)`,
			fn:   keyfunc.Tenant("X-Tenant-ID"), req: req("192.0.2.1:1", "X-Tenant-ID", "a, b"),
			want: "tenant:a, b",
		},
		{
			name: "tenant escaped",
			call: `Tenant("X-Tenant-ID")(a|route:GET /)`,
			fn:   keyfunc.Tenant("X-Tenant-ID"), req: req("192.0.2.1:1", "X-Tenant-ID", "a|route:GET /"),
			want: `tenant:a\|route:GET /`,
		},
		{
			name: "tenant missing",
			call: `Tenant("X-Tenant-ID")()`,
			fn:   keyfunc.Tenant("X-Tenant-ID"), req: req("192.0.2.1:1"),
			wantErr: keyfunc.ErrNoKey,
		},
	})
}

func TestEmptyHeaderErrorNamesHeader(t *testing.T) {
	_, err := keyfunc.Tenant("X-Tenant-ID")(req("192.0.2.1:1"))
	if !errors.Is(err, keyfunc.ErrNoKey) || !strings.Contains(err.Error(), "X-Tenant-ID") {
		t.Errorf(`Tenant("X-Tenant-ID")() error = %v, want ErrNoKey naming X-Tenant-ID`, err)
	}
}

func TestValueTypes(t *testing.T) {
	user := keyfunc.User(userKey)
	tenant := keyfunc.TenantValue(tenantKey)
	cases := []struct {
		name    string
		v       any
		want    string // the key for User; "" when wantErr
		wantErr string // a substring of the error, which must match ErrNoKey
	}{
		{name: "string", v: "alice", want: "user:alice"},
		{name: "string escaped", v: `a|b\`, want: `user:a\|b\\`},
		{name: "bytes", v: []byte("alice"), want: "user:alice"},
		{name: "int", v: 42, want: "user:42"},
		{name: "negative int64", v: int64(-7), want: "user:-7"},
		{name: "int32", v: int32(7), want: "user:7"},
		{name: "int8", v: int8(-8), want: "user:-8"},
		{name: "uint", v: uint(9), want: "user:9"},
		{name: "uint64 max", v: uint64(1<<64 - 1), want: "user:18446744073709551615"},
		{name: "uint16", v: uint16(16), want: "user:16"},
		{name: "named int", v: userID(1001), want: "user:1001"},
		{name: "named string", v: tenantName("acme"), want: "user:acme"},
		{name: "stringer", v: &stringer{"bob"}, want: "user:bob"},
		{name: "nil", v: nil, wantErr: "no user value"},
		{name: "empty string", v: "", wantErr: "empty"},
		{name: "empty bytes", v: []byte{}, wantErr: "empty"},
		{name: "empty stringer", v: &stringer{}, wantErr: "empty"},
		{name: "nil pointer stringer", v: (*stringer)(nil), wantErr: "*keyfunc_test.stringer"},
		{name: "panicking stringer", v: panicker{}, wantErr: "keyfunc_test.panicker"},
		{name: "float", v: 1.5, wantErr: "has type float64"},
		{name: "bool", v: true, wantErr: "has type bool"},
		{name: "struct", v: struct{}{}, wantErr: "has type struct {}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := user(valueReq(userKey, tc.v))
			if tc.wantErr != "" {
				if got != "" || !errors.Is(err, keyfunc.ErrNoKey) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("User(userKey)(%#v) = %q, %v, want \"\", ErrNoKey mentioning %q", tc.v, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("User(userKey)(%#v) = %q, %v, want %q, <nil>", tc.v, got, err, tc.want)
			}
			wantTenant := "tenant:" + strings.TrimPrefix(tc.want, "user:")
			if got, err := tenant(valueReq(tenantKey, tc.v)); err != nil || got != wantTenant {
				t.Errorf("TenantValue(tenantKey)(%#v) = %q, %v, want %q, <nil>", tc.v, got, err, wantTenant)
			}
		})
	}
}

func TestValueKeyIsolation(t *testing.T) {
	// A value stored under another key is not seen.
	got, err := keyfunc.User(userKey)(valueReq(tenantKey, "acme"))
	if !errors.Is(err, keyfunc.ErrNoKey) {
		t.Errorf("User(userKey)(tenant value) = %q, %v, want \"\", ErrNoKey", got, err)
	}
}

func TestRoute(t *testing.T) {
	fn := keyfunc.Route()
	runKeyCases(t, []keyCase{
		{name: "gin pattern", call: `Route()(GET /users/:id)`, fn: fn, req: routeReq("GET", "/users/:id"), want: "route:GET /users/:id"},
		{name: "chi pattern", call: `Route()(POST /users/{id})`, fn: fn, req: routeReq("POST", "/users/{id}"), want: "route:POST /users/{id}"},
		{name: "net/http pattern with method", call: `Route()(GET "GET /users/{id}")`, fn: fn, req: routeReq("GET", "GET /users/{id}"), want: "route:GET /users/{id}"},
		{name: "net/http GET pattern serving HEAD", call: `Route()(HEAD "GET /x")`, fn: fn, req: routeReq("HEAD", "GET /x"), want: "route:GET /x"},
		{name: "net/http HEAD pattern", call: `Route()(HEAD "HEAD /x")`, fn: fn, req: routeReq("HEAD", "HEAD /x"), want: "route:GET /x"},
		{name: "HEAD on a route for every method", call: `Route()(HEAD /x)`, fn: fn, req: routeReq("HEAD", "/x"), want: "route:GET /x"},
		{name: "net/http pattern with host", call: `Route()(GET "GET example.com/x")`, fn: fn, req: routeReq("GET", "GET example.com/x"), want: "route:GET example.com/x"},
		{name: "custom method in pattern", call: `Route()(PROPFIND "PROPFIND /dav")`, fn: fn, req: routeReq("PROPFIND", "PROPFIND /dav"), want: "route:PROPFIND /dav"},
		{name: "invented method", call: `Route()(XYZZY /any)`, fn: fn, req: routeReq("XYZZY", "/any"), want: "route:OTHER /any"},
		{name: "method with separator", call: `Route()(A|B /any)`, fn: fn, req: routeReq("A|B", "/any"), want: "route:OTHER /any"},
		{name: "lowercase method", call: `Route()(get /any)`, fn: fn, req: routeReq("get", "/any"), want: "route:OTHER /any"},
		{name: "pattern escaped", call: `Route()(GET /a|b)`, fn: fn, req: routeReq("GET", `/a|b\`), want: `route:GET /a\|b\\`},
		{name: "method-only prefix is not a pattern prefix", call: `Route()(GET "GETX /x")`, fn: fn, req: routeReq("GET", "GETX /x"), want: "route:GET GETX /x"},
		{name: "unknown pattern", call: `Route()(GET "")`, fn: fn, req: routeReq("GET", ""), wantErr: keyfunc.ErrNoKey},
	})
}

func TestStatic(t *testing.T) {
	runKeyCases(t, []keyCase{
		{name: "plain", call: `Static("global")`, fn: keyfunc.Static("global"), req: req(""), want: "static:global"},
		{name: "empty", call: `Static("")`, fn: keyfunc.Static(""), req: req(""), want: "static:"},
		{name: "escaped", call: `Static("a|b")`, fn: keyfunc.Static("a|b"), req: req(""), want: `static:a\|b`},
	})
}

var errBoom = errors.New("boom")

func failWith(err error) keyfunc.Func {
	return func(keyfunc.Request) (string, error) { return "", err }
}

func TestJoinAndFirst(t *testing.T) {
	tenant := keyfunc.Tenant("X-Tenant-ID")
	route := keyfunc.Route()
	withTenant := routeReq("GET", "/search")
	withTenant.headers["X-Tenant-Id"] = "acme"
	noTenant := routeReq("GET", "/search")
	noRoute := routeReq("GET", "")
	noRoute.headers["X-Tenant-Id"] = "acme"

	runKeyCases(t, []keyCase{
		{name: "join", call: "Join(Tenant, Route)(acme, /search)", fn: keyfunc.Join(tenant, route), req: withTenant, want: "tenant:acme|route:GET /search"},
		{name: "join one", call: "Join(Tenant)(acme)", fn: keyfunc.Join(tenant), req: withTenant, want: "tenant:acme"},
		{name: "join three", call: "Join(Static, Tenant, Route)", fn: keyfunc.Join(keyfunc.Static("api"), tenant, route), req: withTenant, want: "static:api|tenant:acme|route:GET /search"},
		{name: "join first part missing", call: "Join(Tenant, Route)(no tenant)", fn: keyfunc.Join(tenant, route), req: noTenant, wantErr: keyfunc.ErrNoKey},
		{name: "join last part missing", call: "Join(Tenant, Route)(no route)", fn: keyfunc.Join(tenant, route), req: noRoute, wantErr: keyfunc.ErrNoKey},
		{name: "join other error", call: "Join(Tenant, fail)", fn: keyfunc.Join(tenant, failWith(errBoom)), req: withTenant, wantErr: errBoom},
		{name: "first takes first", call: "First(Tenant, IP)(acme)", fn: keyfunc.First(tenant, keyfunc.IP()), req: withTenant, want: "tenant:acme"},
		{name: "first falls back", call: "First(Tenant, IP)(no tenant)", fn: keyfunc.First(tenant, keyfunc.IP()), req: noTenant, want: "ip:192.0.2.1"},
		{name: "first falls back on wrapped ErrNoKey", call: "First(wrapped, Static)", fn: keyfunc.First(failWith(fmt.Errorf("mine: %w", keyfunc.ErrNoKey)), keyfunc.Static("x")), req: noTenant, want: "static:x"},
		{name: "first all missing", call: "First(Tenant, Route)(nothing)", fn: keyfunc.First(tenant, route), req: routeReq("GET", ""), wantErr: keyfunc.ErrNoKey},
		{name: "first stops on other error", call: "First(fail, Static)", fn: keyfunc.First(failWith(errBoom), keyfunc.Static("x")), req: noTenant, wantErr: errBoom},
		{name: "first inside join", call: "Join(First(Tenant, IP), Route)", fn: keyfunc.Join(keyfunc.First(tenant, keyfunc.IP()), route), req: noTenant, want: "ip:192.0.2.1|route:GET /search"},
		{name: "join inside first", call: "First(Join(Tenant, Route), IP)", fn: keyfunc.First(keyfunc.Join(tenant, route), keyfunc.IP()), req: noTenant, want: "ip:192.0.2.1"},
	})
}

func TestJoinFirstErrorKeepsDetail(t *testing.T) {
	_, err := keyfunc.Join(keyfunc.Static("x"), keyfunc.Tenant("X-Tenant-ID"))(req("192.0.2.1:1"))
	if !errors.Is(err, keyfunc.ErrNoKey) || !strings.Contains(err.Error(), "X-Tenant-ID") {
		t.Errorf("Join(Static, Tenant)() error = %v, want ErrNoKey naming X-Tenant-ID", err)
	}
	_, err = keyfunc.First(keyfunc.Tenant("X-Tenant-ID"), keyfunc.User(userKey))(req("192.0.2.1:1"))
	if !errors.Is(err, keyfunc.ErrNoKey) || !strings.Contains(err.Error(), "user") {
		t.Errorf("First(Tenant, User)() error = %v, want the last ErrNoKey, naming user", err)
	}
}

// TestJoinNoCollision checks values that would produce the same joined key
// if '|' and '\' were not escaped.
func TestJoinNoCollision(t *testing.T) {
	fn := keyfunc.Join(keyfunc.Tenant("A"), keyfunc.Tenant("B"))
	pairs := []struct {
		name       string
		a, b, c, d string
	}{
		{name: "separator moved between parts", a: "x|tenant:y", b: "z", c: "x", d: "y|tenant:z"},
		{name: "separator at edge", a: "x|", b: "y", c: "x", d: "|y"},
		{name: "escape char before separator", a: `x\`, b: "y", c: "x", d: `\y`},
		{name: "escaped separator in value", a: `x\|tenant:y`, b: "z", c: `x\`, d: "tenant:y|z"},
		{name: "trailing escape", a: `\`, b: `\`, c: `\\`, d: ``},
		{name: "escape char swallowing separator", a: `x\`, b: "|tenant:d", c: `x|tenant:\`, d: "d"},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			k1, err1 := fn(req("192.0.2.1:1", "A", p.a, "B", p.b))
			k2, err2 := fn(req("192.0.2.1:1", "A", p.c, "B", p.d))
			if err1 == nil && err2 == nil && k1 == k2 {
				t.Errorf("Join(Tenant A, Tenant B)(%q, %q) = %q, and the same for (%q, %q); want different keys", p.a, p.b, k1, p.c, p.d)
			}
		})
	}

	// Splitting a joined key on unescaped separators gives back the parts.
	for _, v := range [][2]string{{`x\`, "y"}, {"a|b", `|\|`}, {`\|`, `\\`}} {
		k, err := fn(req("192.0.2.1:1", "A", v[0], "B", v[1]))
		want := []string{"tenant:" + v[0], "tenant:" + v[1]}
		if got := splitKey(k); err != nil || !slices.Equal(got, want) {
			t.Errorf("Join(Tenant A, Tenant B)(%q, %q) = %q, %v, which splits into %q, want %q", v[0], v[1], k, err, got, want)
		}
	}

	// Different dimensions never collide, even with the same text.
	k1, _ := keyfunc.Tenant("A")(req("", "A", "42"))
	k2, _ := keyfunc.User(userKey)(valueReq(userKey, 42))
	if k1 == k2 {
		t.Errorf("Tenant and User both gave %q for 42, want different keys", k1)
	}
}

// splitKey splits a joined key at its unescaped separators and removes the
// escapes from each part.
func splitKey(key string) []string {
	var parts []string
	var part []byte
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c == '\\' && i+1 < len(key):
			i++
			part = append(part, key[i])
		case c == '|':
			parts = append(parts, string(part))
			part = part[:0]
		default:
			part = append(part, c)
		}
	}
	return append(parts, string(part))
}

func TestSetupPanics(t *testing.T) {
	cases := []struct {
		name    string
		call    func()
		mention string // text the panic message must contain after "keyfunc: "
	}{
		{name: "TrustProxies bad entry", call: func() { keyfunc.TrustProxies("10.0.0.0/8", "10.0.0.0/33") }, mention: `"10.0.0.0/33"`},
		{name: "TrustProxies hostname", call: func() { keyfunc.TrustProxies("proxy.internal") }, mention: `"proxy.internal"`},
		{name: "TrustProxies empty entry", call: func() { keyfunc.TrustProxies("") }, mention: `""`},
		{name: "IPv6Prefix 0", call: func() { keyfunc.IPv6Prefix(0) }, mention: "IPv6Prefix"},
		{name: "IPv6Prefix 129", call: func() { keyfunc.IPv6Prefix(129) }, mention: "IPv6Prefix"},
		{name: "IPv4Prefix 0", call: func() { keyfunc.IPv4Prefix(0) }, mention: "IPv4Prefix"},
		{name: "IPv4Prefix 33", call: func() { keyfunc.IPv4Prefix(33) }, mention: "IPv4Prefix"},
		{name: "IP nil option", call: func() { keyfunc.IP(nil) }, mention: "IP"},
		{name: "TrustHeader invalid", call: func() { keyfunc.TrustHeader("X Real IP") }, mention: "TrustHeader"},
		{name: "Header empty", call: func() { keyfunc.Header("") }, mention: "Header"},
		{name: "Header invalid", call: func() { keyfunc.Header("X-Key:") }, mention: "Header"},
		{name: "Tenant invalid", call: func() { keyfunc.Tenant("X Tenant") }, mention: "Tenant"},
		{name: "User nil key", call: func() { keyfunc.User(nil) }, mention: "User"},
		{name: "TenantValue uncomparable key", call: func() { keyfunc.TenantValue([]string{"k"}) }, mention: "TenantValue"},
		{name: "Join nothing", call: func() { keyfunc.Join() }, mention: "Join"},
		{name: "Join nil", call: func() { keyfunc.Join(keyfunc.IP(), nil) }, mention: "Join"},
		{name: "First nothing", call: func() { keyfunc.First() }, mention: "First"},
		{name: "First nil", call: func() { keyfunc.First(nil) }, mention: "First"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := panicMessage(tc.call)
			if !strings.HasPrefix(msg, "keyfunc: ") || !strings.Contains(msg, tc.mention) {
				t.Errorf("%s panicked with %q, want a message starting \"keyfunc: \" and mentioning %s", tc.name, msg, tc.mention)
			}
		})
	}
}

// panicMessage calls f and returns what it panicked with, as text, or ""
// if it returned normally.
func panicMessage(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

func TestAllocs(t *testing.T) {
	tenant := req("192.0.2.1:1", "X-Tenant-ID", "acme")
	routed := routeReq("GET", "/users/{id}")
	cases := []struct {
		name string
		fn   keyfunc.Func
		req  *fakeRequest
		max  float64
	}{
		{name: "IP IPv4", fn: keyfunc.IP(), req: req("203.0.113.7:5678"), max: 1},
		{name: "IP IPv6", fn: keyfunc.IP(), req: req("[2001:db8:1:2::7]:5678"), max: 1},
		{name: "IP IPv4-mapped", fn: keyfunc.IP(), req: req("[::ffff:203.0.113.7]:5678"), max: 1},
		{name: "IP IPv4 /24", fn: keyfunc.IP(keyfunc.IPv4Prefix(24)), req: req("203.0.113.7:5678"), max: 1},
		{name: "IP trusted XFF", fn: keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8")), req: req("10.0.0.1:5678", "X-Forwarded-For", "6.6.6.6, 203.0.113.7, 10.0.0.2"), max: 1},
		{name: "IP trusted header", fn: keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.TrustHeader("X-Real-IP")), req: req("10.0.0.1:5678", "X-Real-IP", "203.0.113.7"), max: 1},
		{name: "Tenant", fn: keyfunc.Tenant("X-Tenant-ID"), req: tenant, max: 1},
		{name: "Tenant missing", fn: keyfunc.Tenant("X-Tenant-ID"), req: routed, max: 0},
		{name: "Header", fn: keyfunc.Header("X-Tenant-ID"), req: tenant, max: 1},
		{name: "TenantValue string", fn: keyfunc.TenantValue(tenantKey), req: valueReq(tenantKey, "acme"), max: 1},
		{name: "User int64", fn: keyfunc.User(userKey), req: valueReq(userKey, int64(123456789)), max: 1},
		{name: "Route", fn: keyfunc.Route(), req: routed, max: 1},
		{name: "Route net/http pattern", fn: keyfunc.Route(), req: routeReq("GET", "GET /users/{id}"), max: 1},
		{name: "Route unknown", fn: keyfunc.Route(), req: routeReq("GET", ""), max: 0},
		{name: "Static", fn: keyfunc.Static("global"), req: tenant, max: 0},
		{name: "Join of two", fn: keyfunc.Join(keyfunc.Tenant("X-Tenant-ID"), keyfunc.IP()), req: tenant, max: 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.fn(tc.req); err != nil && tc.max > 0 {
				t.Fatalf("%s(%s) failed: %v", tc.name, tc.req.remote, err)
			}
			got := testing.AllocsPerRun(100, func() { _, _ = tc.fn(tc.req) })
			t.Logf("%s: %v allocs per call", tc.name, got)
			if got > tc.max {
				t.Errorf("AllocsPerRun(%s) = %v, want <= %v", tc.name, got, tc.max)
			}
		})
	}
}
