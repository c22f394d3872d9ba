package policy

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/overrides"
)

// pathOpts is a tree of WithPath: the root (org) at the middleware's limit,
// then team, user and key levels from headers.
func pathOpts(extra ...opt) []opt {
	return append([]opt{
		WithScope[req, struct{}]("api"),
		WithHeaders[req, struct{}](HeadersIETF),
		WithProblemJSON[req, struct{}](true),
		WithPath[req, struct{}]("org",
			PathLevel{Name: "team", Key: keyfunc.Header("X-Team"), Limits: []core.Limit{core.PerMinute(100)}},
			PathLevel{Name: "user", Key: keyfunc.Header("X-User"), Limits: []core.Limit{core.PerMinute(2)}},
			PathLevel{Name: "key", Key: keyfunc.Header("X-Key"), Limits: []core.Limit{core.PerMinute(100)}},
		),
	}, extra...)
}

// TestPathPolicy: a user's denial names the user level in the headers and
// the problem body, and charges nothing at the organisation; a request
// without the lower keys is decided on the levels it has.
func TestPathPolicy(t *testing.T) {
	p := newTestPolicy(t, core.PerHour(1000).WithName("monthly"), keyfunc.Header("X-Org"), pathOpts()...)
	ctx := context.Background()
	alice := fakeReq{headers: map[string]string{"X-Org": "acme", "X-Team": "eng", "X-User": "alice", "X-Key": "k1"}}
	for i := range 3 {
		v := p.Decide(ctx, alice)
		if want := i < 2; (v.Action == Continue) != want {
			t.Fatalf("request %d: %+v", i, v)
		}
		if i == 2 {
			if v.Result.Level != "user" {
				t.Fatalf("denied by level %q, want user", v.Result.Level)
			}
			h := headersOf(v)
			if got, want := h["RateLimit"], `"user.2/m";r=0;t=30`; got != want {
				t.Fatalf("RateLimit = %q, want %q", got, want)
			}
			if got, want := h["RateLimit-Policy"], `"org.monthly";q=1000;w=3600, "team.100/m";q=100;w=60, "user.2/m";q=2;w=60, "key.100/m";q=100;w=60`; got != want {
				t.Fatalf("RateLimit-Policy = %q, want %q", got, want)
			}
			_, body := v.Body()
			var pd struct {
				Violated []string `json:"violated-policies"`
			}
			if err := json.Unmarshal(body, &pd); err != nil || len(pd.Violated) != 1 || pd.Violated[0] != "user.2/m" {
				t.Fatalf("problem %s: want violated-policies [user.2/m]", body)
			}
		}
	}
	// The organisation alone: two admitted, the denial not charged.
	v := p.Decide(ctx, fakeReq{headers: map[string]string{"X-Org": "acme"}})
	if v.Action != Continue || v.Result.Level != "org" || v.Result.Remaining != 997 {
		t.Fatalf("the organisation alone: %+v; want Remaining 997", v.Result)
	}
}

// TestPathPolicyOverrides: an override of a level's key changes that
// level's limits at run time, as it does the root's.
func TestPathPolicyOverrides(t *testing.T) {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	ov, err := overrides.New(lim, "plans")
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	p, _, err := New(lim, core.PerHour(1000), keyfunc.Header("X-Org"), self, pathOpts(WithOverrides[req, struct{}](ov))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bob := fakeReq{headers: map[string]string{"X-Org": "acme", "X-Team": "eng", "X-User": "bob"}}
	for range 2 {
		p.Decide(ctx, bob)
	}
	if v := p.Decide(ctx, bob); v.Action != Deny || v.Result.Level != "user" {
		t.Fatalf("bob's third request: %+v, want denied by the user level", v.Result)
	}
	o, err := overrides.Parse("10/m")
	if err != nil {
		t.Fatal(err)
	}
	if err := ov.Set(ctx, "header:x-user:bob", o); err != nil {
		t.Fatal(err)
	}
	v := p.Decide(ctx, bob)
	if v.Action != Continue || v.Result.Level != "user" || v.Result.Limit != core.PerMinute(10) || v.Result.Remaining != 9 {
		t.Fatalf("bob upgraded: %+v, want admitted", v.Result)
	}
}

// TestPathPolicyErrors: WithPath's levels are checked when the middleware
// is made.
func TestPathPolicyErrors(t *testing.T) {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	k := keyfunc.Header("X")
	for name, o := range map[string]opt{
		"no root":   WithPath[req, struct{}](""),
		"no key":    WithPath[req, struct{}]("org", PathLevel{Name: "team", Limits: []core.Limit{core.PerHour(1)}}),
		"no limits": WithPath[req, struct{}]("org", PathLevel{Name: "team", Key: k}),
		"twice":     WithPath[req, struct{}]("org", PathLevel{Name: "org", Key: k, Limits: []core.Limit{core.PerHour(1)}}),
		"bad limit": WithPath[req, struct{}]("org", PathLevel{Name: "team", Key: k, Limits: []core.Limit{{Rate: 1}}}),
	} {
		if _, _, err := New(lim, core.PerHour(1), k, self, o); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}
