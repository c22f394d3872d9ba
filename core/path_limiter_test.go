package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// tenantLevels is the tree of the path tests: an organisation's hourly
// quota, a team's rate, a user's small burst, an API key's rate.
var tenantLevels = []Level{
	{Name: "org", Limits: []Limit{PerHour(100).WithName("org-hourly")}},
	{Name: "team", Limits: []Limit{PerHour(50).WithName("team-rate")}},
	{Name: "user", Limits: []Limit{PerMinute(2).WithName("user-burst")}},
	{Name: "key", Limits: []Limit{PerHour(30).WithName("key-rate")}},
}

// pathLimiters are a Redis-backed limiter and a memory one, which the path
// tests run alike.
func pathLimiters(t *testing.T) map[string]*Limiter {
	t.Helper()
	mem, err := NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*Limiter{"redis": newRedisLimiter(t, redistest.Addr(t), WithPrefix(uniquePrefix())), "memory": mem}
}

// TestPathDenialChargesNoAncestor is the bug of nested limits counted
// level by level (envoyproxy/ratelimit #435): a request the user level
// denies must not be charged to the organisation, its team or its key.
// Here the user's third request is denied at the user level, and the
// organisation's quota then shows two requests spent, not three.
func TestPathDenialChargesNoAncestor(t *testing.T) {
	ctx := context.Background()
	for name, lim := range pathLimiters(t) {
		t.Run(name, func(t *testing.T) {
			r, err := lim.PreparePath("api", tenantLevels...)
			if err != nil {
				t.Fatal(err)
			}
			path := []string{"acme", "eng", "alice", "key-1"}
			for i := range 5 {
				res, err := r.Allow(ctx, path...)
				if err != nil {
					t.Fatal(err)
				}
				if want := i < 2; res.Allowed != want {
					t.Fatalf("request %d: Allowed = %v, want %v", i+1, res.Allowed, want)
				}
				if i >= 2 && (res.Level != "user" || res.Limit.Name != "user-burst" || res.RetryAfter <= 0) {
					t.Fatalf("request %d: denied by level %q limit %q, RetryAfter %v; want the user level's user-burst", i+1, res.Level, res.Limit.Name, res.RetryAfter)
				}
			}
			// The organisation alone: 100 less the two admitted, less this one.
			res, err := r.Allow(ctx, "acme")
			if err != nil {
				t.Fatal(err)
			}
			if !res.Allowed || res.Level != "org" || res.Remaining != 97 {
				t.Fatalf("the organisation after 2 admitted and 3 denied requests: %+v; want Remaining 97 (a denied request charged nothing)", res)
			}
			// The team and key levels, on the same path up to them.
			res, err = r.AllowN(ctx, []string{"acme", "eng"}, 1)
			if err != nil || res.Level != "team" || res.Remaining != 47 {
				t.Fatalf("the team: %+v, %v; want Remaining 47", res, err)
			}
			// Another user of the team is not denied by alice's limit, and
			// its own key has its own bucket.
			res, err = r.Allow(ctx, "acme", "eng", "bob", "key-1")
			if err != nil || !res.Allowed || res.Level != "user" || res.Remaining != 1 {
				t.Fatalf("bob: %+v, %v; want admitted, the user level deciding with 1 left", res, err)
			}
			// A team "eng" of another organisation is another bucket.
			res, err = r.AllowN(ctx, []string{"globex", "eng"}, 1)
			if err != nil || res.Remaining != 49 {
				t.Fatalf("globex's eng: %+v, %v; want Remaining 49", res, err)
			}
		})
	}
}

// TestPathDenialAtTheRoot: when the organisation's quota is spent, no
// lower level is charged either, and the organisation decides.
func TestPathDenialAtTheRoot(t *testing.T) {
	ctx := context.Background()
	for name, lim := range pathLimiters(t) {
		t.Run(name, func(t *testing.T) {
			r, err := lim.PreparePath("root", Level{Name: "org", Limits: []Limit{PerHour(3)}}, Level{Name: "user", Limits: []Limit{PerHour(10)}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if res, err := r.Allow(ctx, "o", "u1"); err != nil || !res.Allowed {
					t.Fatalf("request %d: %+v, %v", i, res, err)
				}
			}
			res, err := r.Allow(ctx, "o", "u2")
			if err != nil || res.Allowed || res.Level != "org" {
				t.Fatalf("a fourth request in the organisation: %+v, %v; want denied by org", res, err)
			}
			// u2 was not charged: a path of its own root shows it full.
			res, err = r.Allow(ctx, "o", "u2")
			if err != nil || res.Allowed {
				t.Fatal("the organisation admitted beyond its quota")
			}
		})
	}
}

// TestPathReserveSettlesEveryLevel reserves 10 on a path and settles 2:
// every level gets 8 back, in one settlement; settling again changes
// nothing.
func TestPathReserveSettlesEveryLevel(t *testing.T) {
	ctx := context.Background()
	levels := []Level{{Name: "org", Limits: []Limit{PerHour(100)}}, {Name: "team", Limits: []Limit{PerHour(50)}}, {Name: "user", Limits: []Limit{PerHour(20)}}}
	for name, lim := range pathLimiters(t) {
		t.Run(name, func(t *testing.T) {
			r, err := lim.PreparePath("llm", levels...)
			if err != nil {
				t.Fatal(err)
			}
			rv, err := r.Reserve(ctx, []string{"acme", "eng", "alice"}, 10)
			if err != nil || !rv.Result.Allowed || rv.Result.Level != "user" || rv.Result.Remaining != 10 {
				t.Fatalf("Reserve = %+v, %v", rv, err)
			}
			if err := rv.Settle(ctx, 2); err != nil {
				t.Fatal(err)
			}
			if err := rv.Settle(ctx, 2); !errors.Is(err, ErrSettled) {
				t.Fatalf("second Settle = %v, want ErrSettled", err)
			}
			for depth, want := range []int{97, 47, 17} {
				path := []string{"acme", "eng", "alice"}[:depth+1]
				res, err := r.AllowN(ctx, path, 1)
				if err != nil || res.Remaining != want {
					t.Fatalf("level %d after settling 2 of 10 and one more request: %+v, %v; want Remaining %d", depth, res, err, want)
				}
			}
			if _, err := r.Reserve(ctx, []string{"acme", "eng", "alice", "extra"}, 1); err == nil {
				t.Fatal("Reserve of a path longer than the rule's levels succeeded")
			}
		})
	}
}

// TestPathFallbackShares: with Redis unreachable, a path is decided by the
// local fallback, all or nothing, with each level's share for the fleet
// (here two replicas: half of each limit).
func TestPathFallbackShares(t *testing.T) {
	lim, err := New(outageClient(t, refusedAddr(t)), WithFallbackReplicas(2), WithTimeout(200*time.Millisecond), WithPrefix(uniquePrefix()))
	if err != nil {
		t.Fatal(err)
	}
	r, err := lim.PreparePath("fb", Level{Name: "org", Limits: []Limit{PerHour(20)}}, Level{Name: "user", Limits: []Limit{PerHour(4)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admitted := 0
	for range 5 {
		res, err := r.Allow(ctx, "o", "u")
		if err != nil {
			t.Fatal(err)
		}
		if !res.Degraded {
			t.Fatalf("%+v: want a degraded decision", res)
		}
		if res.Allowed {
			admitted++
		} else if res.Level != "user" || res.Limit.Burst != 2 {
			t.Fatalf("denial %+v: want the user level's share, Burst 2", res)
		}
	}
	if admitted != 2 {
		t.Fatalf("admitted %d, want the user level's share: 2", admitted)
	}
	// The organisation's share (10) was charged the two admitted only.
	res, err := r.Allow(ctx, "o")
	if err != nil || !res.Allowed || res.Remaining != 7 {
		t.Fatalf("the organisation's share: %+v, %v; want Remaining 7", res, err)
	}
}

// TestPreparePathErrors: bad levels and paths are refused with errors
// naming them.
func TestPreparePathErrors(t *testing.T) {
	lim, err := NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	ok := Level{Name: "org", Limits: []Limit{PerHour(1)}}
	for _, c := range []struct {
		name   string
		levels []Level
	}{
		{"none", nil},
		{"unnamed", []Level{{Limits: []Limit{PerHour(1)}}}},
		{"twice", []Level{ok, ok}},
		{"no limits", []Level{{Name: "org"}}},
		{"bad limit", []Level{{Name: "org", Limits: []Limit{{Rate: 1}}}}},
		{"nine", []Level{ok, {Name: "2", Limits: ok.Limits}, {Name: "3", Limits: ok.Limits}, {Name: "4", Limits: ok.Limits}, {Name: "5", Limits: ok.Limits}, {Name: "6", Limits: ok.Limits}, {Name: "7", Limits: ok.Limits}, {Name: "8", Limits: ok.Limits}, {Name: "9", Limits: ok.Limits}}},
	} {
		if _, err := lim.PreparePath("", c.levels...); err == nil {
			t.Errorf("%s: PreparePath succeeded", c.name)
		}
	}
	r, err := lim.PreparePath("", ok, Level{Name: "user", Limits: []Limit{PerHour(2)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, path := range [][]string{nil, {"o", ""}, {"", "u"}, {"o", "u", "x"}} {
		if _, err := r.AllowN(ctx, path, 1); err == nil {
			t.Errorf("AllowN(%q) succeeded", path)
		}
	}
	if _, err := r.AllowN(ctx, []string{"o", "u"}, 2); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("a cost above the smallest Burst: %v, want ErrInvalidLimit", err)
	}
}
