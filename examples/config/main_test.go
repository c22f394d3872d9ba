package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
)

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})

// build does what run does with a file, on a memory limiter.
func build(data []byte) (http.Handler, error) {
	cfg, err := load(data)
	if err != nil {
		return nil, err
	}
	opts, err := cfg.limiterOptions()
	if err != nil {
		return nil, err
	}
	lim, err := core.NewMemory(opts...)
	if err != nil {
		return nil, err
	}
	return cfg.Handler(lim, ok)
}

func TestSample(t *testing.T) {
	h, err := build(sample)
	if err != nil {
		t.Fatalf("the sample: %v", err)
	}
	const alice, bob = "192.0.2.1:1000", "192.0.2.2:1000"
	steps := []struct {
		method, path, peer, tenant, user string
		want                             int
	}{
		// 5/15m burst 2, per client address.
		{"POST", "/login", alice, "", "", 200},
		{"POST", "/login", alice, "", "", 200},
		{"POST", "/login", alice, "", "", 429},
		{"POST", "/login", bob, "", "", 200},
		// The default limit, 100/m per address: apart from /login's.
		{"GET", "/", alice, "", "", 200},
		// 2/m per tenant; a request without a tenant has no key.
		{"GET", "/search", alice, "acme", "", 200},
		{"GET", "/search", alice, "acme", "", 200},
		{"GET", "/search", alice, "acme", "", 429},
		{"GET", "/search", alice, "globex", "", 200},
		{"GET", "/search", alice, "", "", 400},
		// The same limit and key as /search, and buckets of its own.
		{"GET", "/export", alice, "acme", "", 200},
		{"GET", "/export", alice, "acme", "", 200},
		{"GET", "/export", alice, "acme", "", 429},
		// Scope "items": the two routes spend one 3/m per user.
		{"GET", "/items/1", alice, "", "42", 200},
		{"PUT", "/items/2", alice, "", "42", 200},
		{"GET", "/items/3", alice, "", "42", 200},
		{"PUT", "/items/1", alice, "", "42", 429},
		{"GET", "/items/1", alice, "", "7", 200},
	}
	for i, s := range steps {
		req := httptest.NewRequest(s.method, s.path, nil)
		req.RemoteAddr = s.peer
		req.Header.Set("X-Tenant-ID", s.tenant) // empty is missing
		req.Header.Set("X-User-ID", s.user)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != s.want {
			t.Errorf("step %d: %s %s from %s (tenant %q, user %q) = %d, want %d",
				i, s.method, s.path, s.peer, s.tenant, s.user, rec.Code, s.want)
		}
	}
}

func TestBadConfig(t *testing.T) {
	tests := []struct {
		name, file, want string
	}{
		{"bad limit text", `{"routes": [{"pattern": "POST /login", "limit": "5/fortnight"}]}`,
			`route "POST /login": core: invalid limit: limit "5/fortnight": period "fortnight"`},
		{"bad limit object", `{"routes": [{"pattern": "GET /a", "limit": {"rate": 5, "period": "1m", "brust": 2}}]}`,
			`route "GET /a": core: invalid limit: json: unknown field "brust"`},
		{"burst below 1", `{"routes": [{"pattern": "GET /a", "limit": "5/m burst 0"}]}`,
			`route "GET /a": core: invalid limit: limit "5/m burst 0": burst "0"`},
		{"unknown key", `{"default": "1/s", "routes": [{"pattern": "GET /a", "key": "email"}]}`,
			`route "GET /a": key "email": want one of global, ip, tenant, user`},
		{"unknown route field", `{"routes": [{"pattern": "GET /a", "limt": "5/m"}]}`,
			`route "GET /a": json: unknown field "limt"`},
		{"unknown top-level field", `{"rotues": []}`,
			`json: unknown field "rotues"`},
		{"bad default", `{"default": "lots"}`,
			`core: invalid limit: limit "lots"`},
		{"no limit", `{"routes": [{"pattern": "GET /a"}]}`,
			`route "GET /a": no limit, and no default`},
		{"no pattern", `{"default": "1/s", "routes": [{"key": "ip"}]}`,
			`routes[0]: no pattern`},
		{"same pattern twice", `{"default": "1/s", "routes": [{"pattern": "GET /a"}, {"pattern": "GET /a"}]}`,
			`route "GET /a": pattern "GET /a"`},
		{"unknown failure policy", `{"failure": "fail_sometimes"}`,
			`failure "fail_sometimes": want fallback_local, fail_open or fail_closed`},
		{"bad replicas", `{"replicas": -1}`,
			`core: WithFallbackReplicas: -1 replicas`},
		{"bad proxy", `{"trusted_proxies": ["10.0.0.0/33"], "routes": []}`,
			`trusted_proxies: `},
		{"not JSON", `{"routes": [}`,
			`invalid character '}'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := build([]byte(tt.file))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestRun runs the program as go run does, on an embedded miniredis, then
// checks a good file and a bad one with -check.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	var out bytes.Buffer
	if err := run(nil, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	for _, want := range []string{"POST /login ", " 429\n", "PUT /items/{id}  3/m "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output has no %q:\n%s", want, &out)
		}
	}

	out.Reset()
	if err := run([]string{"-check", "-config", "limits.json"}, &out); err != nil || out.String() != "limits.json: ok, 6 routes\n" {
		t.Errorf("-check limits.json: %v, output %q", err, &out)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"routes": [{"pattern": "GET /a", "limit": "5/m", "key": "email"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run([]string{"-check", "-config", bad}, &out)
	if want := bad + `: route "GET /a": key "email"`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("-check bad.json: %v, want an error beginning %q", err, want)
	}
}

// The sample on a memory limiter: each route has its own buckets, but for
// the two items routes, which share theirs by scope.
func Example() {
	cfg, err := load(sample)
	if err != nil {
		panic(err)
	}
	lim, err := core.NewMemory()
	if err != nil {
		panic(err)
	}
	h, err := cfg.Handler(lim, ok)
	if err != nil {
		panic(err)
	}
	probe(os.Stdout, cfg, h)
	// Output:
	// ROUTE            LIMIT                     KEY     SCOPE        STATUSES
	// GET /{$}         100/m                     ip      GET /{$}     200 200 200 200 200
	// POST /login      5/15m burst 2 name login  ip      POST /login  200 200 429
	// GET /search      2/m                       tenant  GET /search  200 200 429
	// GET /export      2/m                       tenant  GET /export  200 200 429
	// GET /items/{id}  3/m                       user    items        200 200 200 429
	// PUT /items/{id}  3/m                       user    items        429
}
