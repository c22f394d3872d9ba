package policy

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// canaryTenants returns a tenant WithEnforce(fraction) enforces on lim and
// one it leaves in dry run.
func canaryTenants(t *testing.T, lim *core.Limiter, fraction float64) (in, out string) {
	t.Helper()
	r, err := lim.Prepare(core.PerMinute(1))
	if err == nil {
		r, err = r.WithEnforce(fraction)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; in == "" || out == ""; i++ {
		tenant := "t" + strconv.Itoa(i)
		switch {
		case r.Enforced("tenant:"+tenant) && in == "":
			in = tenant
		case !r.Enforced("tenant:"+tenant) && out == "":
			out = tenant
		}
	}
	return in, out
}

func tenantReq(tenant string) fakeReq {
	return fakeReq{headers: map[string]string{"X-Tenant": tenant}}
}

// TestEnforceCanary: under WithEnforce, a key the canary leaves in dry run
// is decided as WithDryRun decides it: it does not wait, a failure of the
// store lets it through, and the dry-run handler is told of both; an
// enforced key waits and fails as usual, and is never reported.
func TestEnforceCanary(t *testing.T) {
	var (
		mu      sync.Mutex
		reports []DryRunReport
	)
	report := WithDryRunHandler[req, struct{}](func(_ req, r DryRunReport) {
		mu.Lock()
		reports = append(reports, r)
		mu.Unlock()
	})
	last := func() (DryRunReport, int) {
		mu.Lock()
		defer mu.Unlock()
		if len(reports) == 0 {
			return DryRunReport{}, 0
		}
		return reports[len(reports)-1], len(reports)
	}
	ctx := context.Background()

	t.Run("wait", func(t *testing.T) {
		reports = nil
		lim := memoryLimiter(t)
		in, out := canaryTenants(t, lim, 0.5)
		p, _, err := New(lim, core.PerSecond(20).WithBurst(1), keyfunc.Tenant("X-Tenant"), self,
			WithEnforce[req, struct{}](0.5), WithWait[req, struct{}](time.Second), report)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if v := p.Decide(ctx, tenantReq(in)); v.Action != Continue || v.Result.DryRun {
				t.Fatalf("enforced tenant: %+v, want Continue, enforced", v)
			}
		}
		if _, n := last(); n != 0 {
			t.Fatalf("the enforced tenant was reported %d times", n)
		}
		p.Decide(ctx, tenantReq(out))
		v := p.Decide(ctx, tenantReq(out))
		r, n := last()
		if v.Action != Continue || v.Result.Wait != 0 || len(headersOf(v)) != 0 || n != 2 || r.Result.Allowed || !r.Result.DryRun {
			t.Fatalf("the dry-run tenant's second request: %+v (fields %v), report %d %+v; want Continue at once, a would-be denial reported", v, headersOf(v), n, r)
		}
	})

	t.Run("store down under FailClosed", func(t *testing.T) {
		reports = nil
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		lim, err := core.New(rdb, core.WithFailurePolicy(core.FailClosed), core.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		in, out := canaryTenants(t, lim, 0.5)
		p, _, err := New(lim, core.PerMinute(1), keyfunc.Tenant("X-Tenant"), self, WithEnforce[req, struct{}](0.5), report)
		if err != nil {
			t.Fatal(err)
		}
		if v := p.Decide(ctx, tenantReq(in)); v.Action != Fail || v.Status != 503 {
			t.Fatalf("enforced tenant, store down: %+v, want Fail 503", v)
		}
		v := p.Decide(ctx, tenantReq(out))
		r, n := last()
		if v.Action != Continue || n != 1 || !errors.Is(r.Err, core.ErrUnavailable) || r.Key != "tenant:"+out {
			t.Fatalf("dry-run tenant, store down: %+v, report %d %+v; want Continue, the failure reported", v, n, r)
		}
	})
}

// TestEnforceOption: WithEnforce's fraction is checked, and a canary (a
// fraction below 1) takes a dry-run handler; 1 is no canary.
func TestEnforceOption(t *testing.T) {
	handler := WithDryRunHandler[req, struct{}](func(req, DryRunReport) {})
	path := WithPath[req, struct{}]("org", PathLevel{Name: "user", Key: keyfunc.Header("X-User"), Limits: []core.Limit{core.PerSecond(10)}})
	for _, tc := range []struct {
		name string
		opts []opt
		err  string // "" for none
	}{
		{"NaN", []opt{WithEnforce[req, struct{}](math.NaN())}, "WithEnforce: fraction NaN"},
		{"negative", []opt{WithEnforce[req, struct{}](-0.1)}, "WithEnforce: fraction -0.1"},
		{"above 1", []opt{WithEnforce[req, struct{}](1.1)}, "WithEnforce: fraction 1.1"},
		{"with a path", []opt{WithEnforce[req, struct{}](0.5), path}, ""},
		{"1 with a path", []opt{WithEnforce[req, struct{}](1), path}, ""},
		{"canary with a handler", []opt{WithEnforce[req, struct{}](0.1), handler}, ""},
		{"0 with a handler", []opt{WithEnforce[req, struct{}](0), handler}, ""},
		{"1 with a handler", []opt{WithEnforce[req, struct{}](1), handler}, "WithDryRunHandler without WithDryRun(true) or a WithEnforce below 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := New(memoryLimiter(t), core.PerMinute(1), keyfunc.Static("k"), self, tc.opts...)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("New(%s) = %v, want an error containing %q", tc.name, err, tc.err)
			}
		})
	}
}

// TestEnforceCanaryPath: under WithEnforce with WithPath, the root's key
// picks the paths enforced (core.PathRule.WithEnforce): a path under an
// enforced root is denied as usual, at the level that denies, and never
// reported; one under another root is decided as WithDryRun decides it,
// whole, every level in dry run.
func TestEnforceCanaryPath(t *testing.T) {
	var reports []DryRunReport
	lim := memoryLimiter(t)
	in, out := canaryTenants(t, lim, 0.5)
	p, _, err := New(lim, core.PerMinute(100), keyfunc.Tenant("X-Tenant"), self,
		WithEnforce[req, struct{}](0.5),
		WithPath[req, struct{}]("org", PathLevel{Name: "user", Key: keyfunc.Header("X-User"), Limits: []core.Limit{core.PerMinute(1)}}),
		WithDryRunHandler[req, struct{}](func(_ req, r DryRunReport) { reports = append(reports, r) }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	user := func(tenant string) fakeReq {
		return fakeReq{headers: map[string]string{"X-Tenant": tenant, "X-User": "alice"}}
	}
	p.Decide(ctx, user(in))
	if v := p.Decide(ctx, user(in)); v.Action == Continue || v.Result.Level != "user" || v.Result.DryRun || len(reports) != 0 {
		t.Fatalf("the enforced root's second request: %+v, %d reports; want denied by the user level, enforced, none reported", v, len(reports))
	}
	p.Decide(ctx, user(out))
	v := p.Decide(ctx, user(out))
	if v.Action != Continue || len(headersOf(v)) != 0 || len(reports) != 2 {
		t.Fatalf("the dry-run root's second request: %+v (fields %v), %d reports; want Continue without fields, two reports", v, headersOf(v), len(reports))
	}
	if r := reports[1]; r.Result.Allowed || !r.Result.DryRun || r.Result.Level != "user" || r.Key != "tenant:"+out {
		t.Fatalf("report %+v, want the user level's would-be denial of tenant:%s, DryRun", r, out)
	}
}
