package policy

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/overrides"
)

func TestOverrides(t *testing.T) {
	log := &lines{}
	lim, err := core.NewMemory(core.WithLogger(slog.New(log)))
	if err != nil {
		t.Fatal(err)
	}
	ov, err := overrides.New(lim, "plans")
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	p, _, err := New(lim, core.PerMinute(1), keyfunc.Tenant("X-Tenant"), self,
		WithOverrides[req, struct{}](ov), WithHeaders[req, struct{}](HeadersBoth),
		WithLimitFunc[req, struct{}](func(req) (core.Limit, error) { return core.PerMinute(2), nil }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	acme := from("198.51.100.1:1", "acme")
	if h := headersOf(p.Decide(ctx, acme)); h["X-RateLimit-Limit"] != "2" {
		t.Fatalf("before the override: %v, want the limit function's 2", h)
	}
	set := func(key, text string) {
		t.Helper()
		o, err := overrides.Parse(text)
		if err != nil {
			t.Fatal(err)
		}
		if err := ov.Set(ctx, key, o); err != nil {
			t.Fatal(err)
		}
	}
	set("tenant:acme", "50/m name pro")
	for i := range 50 {
		v := p.Decide(ctx, acme)
		if v.Action != Continue {
			t.Fatalf("request %d under the override: %+v", i+1, v)
		}
		if h := headersOf(v); i == 0 && (h["X-RateLimit-Limit"] != "50" || h["RateLimit-Policy"] != `"pro";q=50;w=60`) {
			t.Fatalf("fields under the override: %v", h)
		}
	}
	if v := p.Decide(ctx, acme); v.Action != Deny {
		t.Fatalf("the 51st request: %+v, want Deny", v)
	}
	if err := ov.Remove(ctx, "tenant:acme"); err != nil {
		t.Fatal(err)
	}
	if h := headersOf(p.Decide(ctx, acme)); h["X-RateLimit-Limit"] != "2" {
		t.Fatalf("after the removal: %v, want the limit function's 2", h)
	}

	// Shared list entries: by key and by address.
	set("tenant:evil", "deny")
	set("tenant:vip", "allow")
	set("203.0.113.0/24", "deny")
	if v := p.Decide(ctx, from("198.51.100.1:1", "evil")); v.Status != 403 || !errors.Is(v.Err, ErrDenyList) {
		t.Fatalf("shared deny by key: %+v", v)
	}
	for range 3 {
		if v := p.Decide(ctx, from("198.51.100.1:1", "vip")); v.Action != Continue || len(headersOf(v)) != 0 {
			t.Fatalf("shared allow: %+v", v)
		}
	}
	if v := p.Decide(ctx, from("203.0.113.5:1", "other")); v.Status != 403 {
		t.Fatalf("shared deny by address: %+v", v)
	}
	if err := ov.Remove(ctx, "203.0.113.0/24"); err != nil {
		t.Fatal(err)
	}
	if v := p.Decide(ctx, from("203.0.113.5:1", "other")); v.Action != Continue {
		t.Fatalf("after removing the address entry: %+v", v)
	}
	if len(log.got) != 0 {
		t.Fatalf("logged %q", log.got)
	}
}

// TestOverrideBeyondEightLimits: an override that cannot be used beside the
// middleware's extra limits is ignored, and that is logged once.
func TestOverrideBeyondEightLimits(t *testing.T) {
	log := &lines{}
	lim, _ := core.NewMemory(core.WithLogger(slog.New(log)))
	ov, _ := overrides.New(lim, "plans")
	defer ov.Close()
	p, _, err := New(lim, core.PerMinute(1), keyfunc.Tenant("X-Tenant"), self, WithOverrides[req, struct{}](ov),
		WithLimits[req, struct{}](core.PerHour(100), core.PerHour(101)))
	if err != nil {
		t.Fatal(err)
	}
	o, _ := overrides.Parse(strings.TrimSuffix(strings.Repeat("5/s; ", 7), "; "))
	if err := ov.Set(context.Background(), "tenant:a", o); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if h := headersOf(p.Decide(context.Background(), from("198.51.100.1:1", "a"))); h["X-RateLimit-Limit"] == "" {
			t.Fatalf("no fields: %v", h)
		}
	}
	if len(log.got) != 1 || !strings.Contains(log.got[0], "WithOverrides") {
		t.Fatalf("logged %q, want one line naming WithOverrides", log.got)
	}
}

// TestOverridesCostNoAllocation: a policy with lists and an override set
// allocates no more per request than one without.
func TestOverridesCostNoAllocation(t *testing.T) {
	lim, _ := core.NewMemory()
	ov, _ := overrides.New(lim, "plans")
	defer ov.Close()
	o, _ := overrides.Parse("1000000/s")
	_ = ov.Set(context.Background(), "tenant:acme", o)
	_ = ov.Set(context.Background(), "203.0.113.0/24", overrides.Override{Deny: true})
	key := keyfunc.Static("tenant:acme")
	plain, _, _ := New[req, struct{}](lim, core.PerSecond(1_000_000), key, self)
	listed, _, _ := New(lim, core.PerSecond(1_000_000), key, self, WithOverrides[req, struct{}](ov),
		WithAllow[req, struct{}]("tenant:internal", "10.0.0.0/8"), WithDeny[req, struct{}]("tenant:evil"))
	r := from("198.51.100.1:1", "acme")
	ctx := context.Background()
	allocs := func(p *Policy) float64 {
		return testing.AllocsPerRun(200, func() {
			if v := p.Decide(ctx, r); v.Action != Continue {
				t.Fatalf("Decide = %+v", v)
			}
		})
	}
	if a, b := allocs(plain), allocs(listed); b > a {
		t.Errorf("allocations per request: %v with lists and overrides, %v without", b, a)
	}
}

// TestOverridesChangeUnderLoad changes the set while requests are decided
// (run it with -race): every request gets one of the answers some version
// of the set allows.
func TestOverridesChangeUnderLoad(t *testing.T) {
	lim, _ := core.NewMemory()
	ov, _ := overrides.New(lim, "plans")
	defer ov.Close()
	p, _, err := New(lim, core.PerSecond(1_000_000), keyfunc.Tenant("X-Tenant"), self, WithOverrides[req, struct{}](ov))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	done := make(chan struct{})
	errs := make(chan string, 4)
	for g := range 4 {
		go func() {
			msg := ""
			defer func() { errs <- msg }()
			r := from("203.0.113.9:1", "acme")
			if g%2 == 1 {
				r = from("198.51.100.1:1", "acme")
			}
			for {
				select {
				case <-done:
					return
				default:
				}
				v := p.Decide(ctx, r)
				if v.Action == Deny || (v.Action == Fail && v.Status != 403) {
					msg = "unexpected verdict"
					return
				}
			}
		}()
	}
	o, _ := overrides.Parse("999999/s")
	for i := range 200 {
		key := "tenant:acme"
		if i%2 == 1 {
			key = "203.0.113.0/24"
		}
		_ = ov.Set(ctx, key, overrides.Override{Deny: true})
		_ = ov.Set(ctx, "tenant:acme", o)
		_ = ov.Remove(ctx, key)
	}
	close(done)
	for range 4 {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}
