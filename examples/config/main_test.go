package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/smoketest"
)

// TestRun serves the sample on an embedded miniredis and replays the curl
// lines it prints, then reads the metrics endpoint.
func TestRun(t *testing.T) {
	runOut := func(ctx context.Context, args []string, stdout io.Writer) error {
		return run(ctx, args, stdout, io.Discard)
	}
	out := smoketest.Start(t, runOut, "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0")
	if n := smoketest.Curl(t, out.String()); n < 5 {
		t.Errorf("replayed %d curl lines, want one per route and a 401", n)
	}
	m := regexp.MustCompile(`metrics on (http://\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no metrics address in the output:\n%s", out)
	}
	status, _, err := smoketest.Do(smoketest.Client(), "GET", m[1], nil)
	if err != nil || status != 200 {
		t.Fatalf("GET %s = %d, %v; want 200", m[1], status, err)
	}
}

// serve builds the sample configuration on a fresh miniredis.
func serve(t *testing.T) http.Handler {
	t.Helper()
	cfg, err := Parse("sluice.json", sample)
	if err != nil {
		t.Fatalf("Parse(sample) = %v", err)
	}
	// Under -race, miniredis's Lua can take longer than the sample's 50ms
	// budget, and a decision past its budget goes to the local fallback.
	cfg.Redis.Timeout = 5 * time.Second
	mr := miniredis.RunT(t)
	mr.SetTime(time.Now()) // Redis's clock stands still: no refill between steps, however slow the test
	rdb := newClient(mr.Addr(), cfg.Redis, false)
	t.Cleanup(func() { rdb.Close() })
	a, err := build(cfg, rdb, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("build(sample) = %v", err)
	}
	return a.handler
}

// step is one request and what must come back.
type step struct {
	method, path string
	peer         string // RemoteAddr
	apiKey       string
	status       int
	headers      map[string]string // "" means the field must be absent
}

func runSteps(t *testing.T, h http.Handler, steps []step) {
	t.Helper()
	for i, s := range steps {
		req := httptest.NewRequest(s.method, s.path, nil)
		req.RemoteAddr = s.peer
		if s.apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+s.apiKey)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != s.status {
			t.Fatalf("step %d: %s %s = %d, want %d (body %q)", i, s.method, s.path, rec.Code, s.status, rec.Body.String())
		}
		for name, want := range s.headers {
			if got := rec.Header().Get(name); got != want {
				t.Fatalf("step %d: %s %s: %s = %q, want %q", i, s.method, s.path, name, got, want)
			}
		}
	}
}

func repeat(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestSample(t *testing.T) {
	t.Run("health checks pass without limits", func(t *testing.T) {
		runSteps(t, serve(t), repeat(50, step{method: "GET", path: "/healthz", peer: "192.0.2.1:1000", status: 200,
			headers: map[string]string{"X-RateLimit-Limit": ""}}))
	})
	t.Run("the tenant's plan", func(t *testing.T) {
		h := serve(t)
		free := step{method: "GET", path: "/search", peer: "192.0.2.2:1000", apiKey: "acme-demo-key", status: 200}
		steps := []step{{method: "GET", path: "/search", peer: "192.0.2.2:1000", status: 401}}
		steps = append(steps, repeat(10, free)...) // the free plan's burst
		denied := free
		denied.status = 429
		denied.headers = map[string]string{"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "Retry-After": "1"}
		steps = append(steps, denied)
		pro := step{method: "GET", path: "/search", peer: "192.0.2.2:1000", apiKey: "globex-demo-key", status: 200,
			headers: map[string]string{"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "99"}}
		steps = append(steps, pro)
		runSteps(t, h, steps)
	})
	t.Run("login penalty", func(t *testing.T) {
		login := step{method: "POST", path: "/login", peer: "192.0.2.3:1000", status: 200}
		locked := login
		locked.status = 429
		locked.headers = map[string]string{"Retry-After": "300"}
		steps := append(repeat(5, login), locked, locked)
		other := login
		other.peer = "192.0.2.4:1000"
		runSteps(t, serve(t), append(steps, other))
	})
	t.Run("cost and extra limits", func(t *testing.T) {
		runSteps(t, serve(t), []step{
			{method: "POST", path: "/reports", peer: "192.0.2.5:1000", apiKey: "globex-demo-key", status: 200,
				headers: map[string]string{"X-RateLimit-Remaining": "97"}},
			{method: "GET", path: "/search", peer: "192.0.2.5:1000", apiKey: "globex-demo-key", status: 200,
				headers: map[string]string{"X-RateLimit-Remaining": "99"}}, // a bucket of its own
		})
	})
	t.Run("route keys", func(t *testing.T) {
		runSteps(t, serve(t), []step{
			{method: "GET", path: "/items/1", peer: "192.0.2.6:1000", apiKey: "acme-demo-key", status: 200,
				headers: map[string]string{"X-RateLimit-Limit": "20", "X-RateLimit-Remaining": "19"}},
			{method: "GET", path: "/items/2", peer: "192.0.2.6:1000", apiKey: "acme-demo-key", status: 200,
				headers: map[string]string{"X-RateLimit-Remaining": "18"}}, // the pattern, not the path
		})
	})
	t.Run("dry run never denies", func(t *testing.T) {
		export := step{method: "GET", path: "/export", peer: "192.0.2.7:1000", apiKey: "acme-demo-key", status: 200}
		last := export
		last.headers = map[string]string{"X-RateLimit-Remaining": "0", "Retry-After": ""}
		runSteps(t, serve(t), append(repeat(4, export), last))
	})
	t.Run("per-IP limit before authentication", func(t *testing.T) {
		bad := step{method: "GET", path: "/search", peer: "192.0.2.8:1000", apiKey: "guessed-key", status: 401}
		blocked := bad
		blocked.status = 429
		runSteps(t, serve(t), append(repeat(40, bad), blocked))
	})
}

func TestCheckFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"-check", "sluice.json"}, &out, &errOut); err != nil {
		t.Fatalf("run -check sluice.json = %v (stderr %q)", err, errOut.String())
	}
	want := "sluice.json: ok: 6 routes, 2 plans, 2 tenants, failure policy fallback_local with 3 fallback replicas\n"
	if out.String() != want {
		t.Fatalf("run -check sluice.json printed %q, want %q", out.String(), want)
	}

	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte("{\n  \"routes\": [],\n  \"listen\": 8080\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"-check", bad}, io.Discard, io.Discard)
	want = bad + ":2: routes: must list at least one route\n" + bad + ":3: listen: want a string, got 8080"
	if err == nil || err.Error() != want {
		t.Fatalf("run -check bad.json = %v, want %q", err, want)
	}
}

func TestBrokenFiles(t *testing.T) {
	tests := []struct {
		name string
		file string
		want string
	}{
		{
			name: "burst below 1",
			file: `{
  "routes": [
    { "pattern": "GET /healthz" },
    {
      "pattern": "GET /search",
      "key": ["ip"],
      "limit": { "rate": 5, "period": "1s", "burst": 0 }
    }
  ]
}`,
			want: "config.json:7: routes[1].limit.burst: must be at least 1",
		},
		{
			name: "syntax error",
			file: `{
  "listen": "127.0.0.1:8080"
  "routes": []
}`,
			want: `config.json:3:3: syntax error: invalid character '"' after object key:value pair`,
		},
		{
			name: "empty file",
			file: "\n",
			want: "config.json:1:1: syntax error: the file is empty",
		},
		{
			name: "truncated",
			file: "{\n  \"routes\": [\n",
			want: "config.json:3:1: syntax error: unexpected end of file",
		},
		{
			name: "trailing data",
			file: "{\"routes\": [{\"pattern\": \"/\"}]}\n{}\n",
			want: "config.json:2:1: syntax error: unexpected data after the top-level object",
		},
		{
			name: "not an object",
			file: "[]",
			want: "config.json:1: the configuration must be a JSON object, got an array",
		},
		{
			name: "no routes",
			file: `{ "listen": ":8080" }`,
			want: `config.json:1: missing field "routes"`,
		},
		{
			name: "misspelt field",
			file: `{
  "routes": [
    { "pattern": "GET /a", "key": ["ip"], "limt": { "rate": 1, "period": "1s" } }
  ]
}`,
			want: `config.json:3: routes[0].key: set on a route without "limit" or "plan"` + "\n" +
				`config.json:3: routes[0].limt: unknown field (did you mean "limit"?)`,
		},
		{
			name: "wrong type",
			file: `{
  "routes": [
    {
      "pattern": "GET /a",
      "key": ["ip"],
      "limit": { "rate": "5", "period": "1s" }
    }
  ]
}`,
			want: `config.json:6: routes[0].limit.rate: want an integer, got the string "5"`,
		},
		{
			name: "fractional rate",
			file: `{"routes": [{"pattern": "GET /a", "key": ["ip"], "limit": {"rate": 2.5, "period": "1s"}}]}`,
			want: `config.json:1: routes[0].limit.rate: want an integer, got 2.5`,
		},
		{
			name: "bad duration",
			file: `{
  "routes": [
    {
      "pattern": "GET /a",
      "key": ["ip"],
      "limit": {
        "rate": 5,
        "period": "1 minute"
      }
    }
  ]
}`,
			want: `config.json:8: routes[0].limit.period: want a duration such as "1m" or "250ms", got "1 minute"`,
		},
		{
			name: "missing rate",
			file: `{
  "routes": [
    {
      "pattern": "GET /a",
      "key": ["ip"],
      "limit": {
        "period": "1s"
      }
    }
  ]
}`,
			want: `config.json:6: routes[0].limit: missing field "rate"`,
		},
		{
			name: "limit that cannot be counted exactly",
			file: `{
  "routes": [
    {
      "pattern": "GET /a",
      "key": ["ip"],
      "limit": { "rate": 1, "period": "8760h", "burst": 1000000000 }
    }
  ]
}`,
			want: "config.json:6: routes[0].limit: " + core.Limit{Rate: 1, Period: 8760 * 3600e9, Burst: 1000000000}.Validate().Error(),
		},
		{
			name: "unknown plan",
			file: `{
  "plans": {
    "free": { "rate": 60, "period": "1m" }
  },
  "tenants": {
    "acme": { "plan": "gold", "api_keys": ["k1"] }
  },
  "routes": [{ "pattern": "GET /a" }]
}`,
			want: `config.json:6: tenants.acme.plan: unknown plan "gold" (plans: free)`,
		},
		{
			name: "api key used twice",
			file: `{
  "plans": { "free": { "rate": 60, "period": "1m" } },
  "tenants": {
    "acme": { "plan": "free", "api_keys": ["k1"] },
    "globex": { "plan": "free", "api_keys": ["k2", "k1"] }
  },
  "routes": [{ "pattern": "GET /a" }]
}`,
			want: `config.json:5: tenants.globex.api_keys[1]: already used by tenant "acme" on line 4`,
		},
		{
			name: "tenant key without authentication",
			file: `{
  "routes": [
    {
      "pattern": "GET /a",
      "key": ["tenant"],
      "limit": { "rate": 5, "period": "1s" }
    }
  ]
}`,
			want: `config.json:5: routes[0].key[0]: "tenant" needs "auth": true: the tenant is known only after authentication`,
		},
		{
			name: "plan without authentication",
			file: `{
  "plans": { "free": { "rate": 60, "period": "1m" } },
  "routes": [
    { "pattern": "GET /a", "key": ["ip"], "plan": true }
  ]
}`,
			want: `config.json:4: routes[0].plan: needs "auth": true, since only authenticated requests have a tenant and a plan`,
		},
		{
			name: "limit and plan",
			file: `{
  "plans": { "free": { "rate": 60, "period": "1m" } },
  "routes": [
    {
      "pattern": "GET /a",
      "auth": true,
      "key": ["tenant"],
      "limit": { "rate": 5, "period": "1s" },
      "plan": true
    }
  ]
}`,
			want: `config.json:9: routes[0].plan: conflicts with "limit": a route takes its limit from one or the other`,
		},
		{
			name: "limited route without a key",
			file: `{
  "routes": [
    {
      "pattern": "GET /a",
      "limit": { "rate": 5, "period": "1s" }
    }
  ]
}`,
			want: `config.json:3: routes[0]: missing field "key": a limited route needs one of "ip", "tenant", "route" or "global"`,
		},
		{
			name: "unknown key dimension",
			file: `{
  "routes": [
    {
      "pattern": "GET /a",
      "key": ["ip", "user"],
      "limit": { "rate": 5, "period": "1s" }
    }
  ]
}`,
			want: `config.json:5: routes[0].key[1]: unknown key "user" (want "ip", "tenant", "route" or "global")`,
		},
		{
			name: "cost above the plan's burst",
			file: `{
  "plans": {
    "free": { "rate": 60, "period": "1m", "burst": 10 },
    "pro": { "rate": 600, "period": "1m", "burst": 100 }
  },
  "routes": [
    {
      "pattern": "POST /reports",
      "auth": true,
      "key": ["tenant"],
      "plan": true,
      "cost": 20
    }
  ]
}`,
			want: `config.json:12: routes[0].cost: 20 exceeds the burst of plan "free" (10); such a request could never pass`,
		},
		{
			name: "cost above a replica's share of the burst",
			file: `{
  "failure": { "fallback_replicas": 3 },
  "routes": [
    {
      "pattern": "POST /reports",
      "key": ["ip"],
      "limit": { "rate": 60, "period": "1m", "burst": 10 },
      "cost": 5
    }
  ]
}`,
			want: `config.json:8: routes[0].cost: 5 exceeds the burst of limit 60/1m0s burst 10 in the local fallback (ceil(10/3) = 4): every such request would be denied while Redis is down; lower the cost, raise the burst or lower failure.fallback_replicas`,
		},
		{
			name: "penalty on an unlimited route",
			file: `{
  "routes": [
    { "pattern": "GET /a", "penalty": "1m" }
  ]
}`,
			want: `config.json:3: routes[0].penalty: set on a route without "limit" or "plan"`,
		},
		{
			name: "negative wait",
			file: `{
  "routes": [
    {
      "pattern": "GET /a",
      "key": ["ip"],
      "limit": { "rate": 5, "period": "1s" },
      "wait": "-1s"
    }
  ]
}`,
			want: `config.json:7: routes[0].wait: must not be negative, got -1s`,
		},
		{
			name: "invalid pattern",
			file: `{
  "routes": [
    { "pattern": "GET /items/{id" }
  ]
}`,
			want: `config.json:3: routes[0].pattern: parsing "GET /items/{id": at offset 11: bad wildcard segment (must end with '}')`,
		},
		{
			name: "conflicting patterns",
			file: `{
  "routes": [
    { "pattern": "GET /items/{id}" },
    { "pattern": "GET /items/{name}" }
  ]
}`,
			want: `config.json:4: routes[1].pattern: pattern "GET /items/{name}" conflicts with pattern "GET /items/{id}": GET /items/{name} matches the same requests as GET /items/{id}`,
		},
		{
			name: "same pattern twice",
			file: `{
  "routes": [
    { "pattern": "GET /a" },
    { "pattern": "GET /a" }
  ]
}`,
			want: `config.json:4: routes[1].pattern: "GET /a" is already routes[0] on line 3`,
		},
		{
			name: "method without a space",
			file: `{
  "routes": [
    { "pattern": "GET/a" }
  ]
}`,
			want: `config.json:3: routes[0].pattern: "GET/a" reads as a host name followed by a path; put a space after the method`,
		},
		{
			name: "bad trusted proxy",
			file: `{
  "trusted_proxies": [
    "10.0.0.0/8",
    "10.0.0.0/33"
  ],
  "routes": [{ "pattern": "GET /a" }]
}`,
			want: `config.json:4: trusted_proxies[1]: not a CIDR prefix or an IP address: "10.0.0.0/33"`,
		},
		{
			name: "trusted header without proxies",
			file: `{
  "trusted_header": "X-Real-IP",
  "routes": [{ "pattern": "GET /a" }]
}`,
			want: `config.json:2: trusted_header: has no effect without "trusted_proxies": the header is read only from trusted proxies`,
		},
		{
			name: "unknown failure policy",
			file: `{
  "failure": {
    "policy": "fail_safe",
    "fallback_replicas": 0
  },
  "routes": [{ "pattern": "GET /a" }]
}`,
			want: `config.json:3: failure.policy: unknown policy "fail_safe" (want "fallback_local", "fail_open" or "fail_closed")` + "\n" +
				`config.json:4: failure.fallback_replicas: must be between 1 and 100000, got 0`,
		},
		{
			name: "prefix with a brace",
			file: `{
  "redis": { "prefix": "app:{x}:" },
  "routes": [{ "pattern": "GET /a" }]
}`,
			want: `config.json:2: redis.prefix: must not contain braces: the library owns the key's hash tag`,
		},
		{
			name: "unknown header style",
			file: `{
  "headers": "draft",
  "routes": [{ "pattern": "GET /a" }]
}`,
			want: `config.json:2: headers: unknown style "draft" (want "legacy", "ietf", "both" or "none")`,
		},
		{
			name: "duplicate field",
			file: `{
  "listen": ":8080",
  "routes": [{ "pattern": "GET /a" }],
  "listen": ":9090"
}`,
			want: `config.json:4: listen: duplicate field (first set on line 2)`,
		},
		{
			name: "before_auth without a limit",
			file: `{
  "before_auth": {
    "skip_paths": ["healthz"]
  },
  "routes": [{ "pattern": "GET /a" }]
}`,
			want: `config.json:2: before_auth: missing field "limit"` + "\n" +
				`config.json:3: before_auth.skip_paths[0]: must begin with /, got "healthz"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("config.json", []byte(tt.file))
			if err == nil {
				t.Fatalf("Parse = nil error, want\n%s", tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Fatalf("Parse error =\n%s\nwant\n%s", got, tt.want)
			}
			if _, ok := err.(*Error); !ok {
				t.Fatalf("Parse error is a %T, want *Error", err)
			}
		})
	}
}

// TestCommentsIgnored checks that "//" keys may appear anywhere, repeatedly.
func TestCommentsIgnored(t *testing.T) {
	file := `{
  "//": "one",
  "//": ["two", 2],
  "// three": {},
  "routes": [{ "//": "four", "pattern": "GET /a" }]
}`
	cfg, err := Parse("c.json", []byte(file))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	if len(cfg.Routes) != 1 || cfg.Routes[0].Pattern != "GET /a" {
		t.Fatalf("Parse routes = %+v, want one route GET /a", cfg.Routes)
	}
	if !strings.HasPrefix(cfg.Redis.Prefix, "sluice:") {
		t.Fatalf("default prefix = %q", cfg.Redis.Prefix)
	}
}
