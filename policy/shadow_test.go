package policy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestShadowLimits: a middleware with shadow limits answers every request
// as the same middleware without them (action, status, fields), and its
// results say which shadow limit would have denied.
func TestShadowLimits(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	lim, err := core.NewMemory(core.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	limit := core.PerMinute(3)
	with, _, err := New(lim, limit, keyfunc.Tenant("X-Tenant"), self, WithScope[req, struct{}]("with"),
		WithShadowLimits[req, struct{}](core.PerMinute(2).WithName("lower"), core.PerMinute(4).WithName("higher")))
	if err != nil {
		t.Fatal(err)
	}
	without, _, err := New(lim, limit, keyfunc.Tenant("X-Tenant"), self, WithScope[req, struct{}]("without"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range 5 {
		a, b := with.Decide(ctx, tenantReq("acme")), without.Decide(ctx, tenantReq("acme"))
		if a.Action != b.Action || a.Status != b.Status || fmt.Sprint(headersOf(a)) != fmt.Sprint(headersOf(b)) {
			t.Fatalf("request %d: with shadow limits %+v %v, without %+v %v", i, a, headersOf(a), b, headersOf(b))
		}
		s := a.Result.Shadow
		if s.Len() != 2 || s.Limit(0).Name != "lower" {
			t.Fatalf("request %d: shadow limits %+v", i, s)
		}
		got = append(got, fmt.Sprintf("%v:%v/%v", a.Action == Continue, s.Denied(0), s.Denied(1)))
	}
	want := "[true:false/false true:false/false true:true/false false:true/false false:true/true]"
	if fmt.Sprint(got) != want {
		t.Fatalf("admitted:lower denies/higher denies = %v, want %v", got, want)
	}
}

// TestShadowLimitsOption: the constructor refuses what shadow limits
// cannot be used with, and bad limits.
func TestShadowLimitsOption(t *testing.T) {
	path := WithPath[req, struct{}]("org", PathLevel{Name: "user", Key: keyfunc.Header("X-User"), Limits: []core.Limit{core.PerSecond(10)}})
	nine := make([]core.Limit, 9)
	for i := range nine {
		nine[i] = core.PerSecond(i + 1)
	}
	for _, tc := range []struct {
		name string
		opts []opt
		err  string // "" for none
	}{
		{"one", []opt{WithShadowLimits[req, struct{}](core.PerSecond(1))}, ""},
		{"none", []opt{WithShadowLimits[req, struct{}]()}, ""},
		{"nine", []opt{WithShadowLimits[req, struct{}](nine...)}, "WithShadowLimits: 9 limits, at most 8"},
		{"invalid", []opt{WithShadowLimits[req, struct{}](core.PerSecond(1), core.Limit{Rate: 1, Period: time.Second})}, "WithShadowLimits: limit 1"},
		{"with leases", []opt{WithShadowLimits[req, struct{}](core.PerSecond(1)), WithTokenLeases[req, struct{}](core.LeaseBound{Fraction: 0.1})}, "WithTokenLeases"},
		{"with a path", []opt{WithShadowLimits[req, struct{}](core.PerSecond(1)), path}, "WithPath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := New(memoryLimiter(t), core.PerMinute(1), keyfunc.Static("k"), self, tc.opts...)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("New(%s) = %v, want an error containing %q", tc.name, err, tc.err)
			}
		})
	}
}
