package policy

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestWarningOption: WithWarning's threshold is checked, and refused
// beside WithPath.
func TestWarningOption(t *testing.T) {
	path := WithPath[req, struct{}]("org", PathLevel{Name: "user", Key: keyfunc.Header("X-User"), Limits: []core.Limit{core.PerSecond(10)}})
	for _, tc := range []struct {
		name string
		opts []opt
		err  string // "" for none
	}{
		{"NaN", []opt{WithWarning[req, struct{}](math.NaN())}, "WithWarning: threshold NaN"},
		{"zero", []opt{WithWarning[req, struct{}](0)}, "WithWarning: threshold 0"},
		{"above 1", []opt{WithWarning[req, struct{}](1.2)}, "WithWarning: threshold 1.2"},
		{"with a path", []opt{WithWarning[req, struct{}](0.8), path}, "WithPath"},
		{"1", []opt{WithWarning[req, struct{}](1)}, ""},
		{"with token leases", []opt{WithWarning[req, struct{}](0.8), WithTokenLeases[req, struct{}](core.LeaseBound{Fraction: 0.1})}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := New(memoryLimiter(t), core.PerMinute(100), keyfunc.Static("k"), self, tc.opts...)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("New(%s) = %v, want an error containing %q", tc.name, err, tc.err)
			}
		})
	}
}

// TestWarningField: the field's value is the threshold in percent, on
// admissions over it only; a dry run, which writes no fields, writes
// none; a rule keeps its threshold with a penalty and a dry run.
func TestWarningField(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		at     float64
		dryRun bool
		want   []string // each request's field, "" for none
	}{
		{0.5, false, []string{"", "50", "50", "50", ""}},
		{0.75, false, []string{"", "", "75", "75", ""}},
		{0.333, false, []string{"", "33.3", "33.3", "33.3", ""}},
		{1, false, []string{"", "", "", "100", ""}},
		{0.5, true, []string{"", "", "", "", ""}},
	} {
		p, _, err := New(memoryLimiter(t), core.PerMinute(4), keyfunc.Static("k"), self,
			WithWarning[req, struct{}](tc.at), WithDryRun[req, struct{}](tc.dryRun), WithPenalty[req, struct{}](0))
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range tc.want {
			v := p.Decide(ctx, fakeReq{})
			if got := headersOf(v)["X-RateLimit-Warning"]; got != want || v.Result.Warning != (tc.at <= float64(i+1)/4 && i < 4) {
				t.Fatalf("at %v (dry run %v), request %d: field %q, Result.Warning %v; want %q", tc.at, tc.dryRun, i+1, got, v.Result.Warning, want)
			}
		}
	}
}
