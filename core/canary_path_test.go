package core_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
)

// pathCanary prepares a path rule of an org level (one request a minute)
// and a user level on lim, with a canary at fraction.
func pathCanary(t *testing.T, lim *core.Limiter, fraction float64) *core.PathRule {
	t.Helper()
	r, err := lim.PreparePath("api", core.Level{Name: "org", Limits: []core.Limit{core.PerMinute(1)}},
		core.Level{Name: "user", Limits: []core.Limit{core.PerMinute(10)}})
	if err == nil {
		r, err = r.WithEnforce(fraction)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPathEnforceCanary: a path rule's canary picks roots by the same
// keyed hash as Rule.WithEnforce: at 10% of 10⁴ roots, exactly the keys a
// Rule enforces at 10% (so 9% to 11%), without and with a slot key, the
// same on every backend and instance, growing with the fraction; a path
// under an enforced root is denied as usual, one under another root is
// decided as a dry run's (charged, marked DryRun, never denied).
func TestPathEnforceCanary(t *testing.T) {
	ctx := context.Background()
	for _, b := range canaryBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			for _, opts := range [][]core.Option{nil, {core.WithSlotKey([]byte("0123456789abcdef"))}} {
				lim := b.make(t, opts...)
				r, _ := lim.Prepare(core.PerMinute(1))
				keyed, err := r.WithEnforce(0.10)
				if err != nil {
					t.Fatal(err)
				}
				at10, at5, at20 := pathCanary(t, lim, 0.10), pathCanary(t, b.make(t, opts...), 0.05), pathCanary(t, b.make(t, opts...), 0.20)
				n := 0
				for i := range canaryKeys {
					root := canaryKey(i)
					e := at10.Enforced(root)
					if e != keyed.Enforced(root) {
						t.Fatalf("%q: the path rule enforces it %v, the Rule at the same fraction %v", root, e, !e)
					}
					if at5.Enforced(root) && !at20.Enforced(root) {
						t.Fatalf("%q: enforced at 5%% but not at 20%%", root)
					}
					if e {
						n++
					}
				}
				if n < 900 || n > 1100 {
					t.Fatalf("PathRule.WithEnforce(0.10) enforced %d of %d roots, want 900 to 1100", n, canaryKeys)
				}
			}
			lim := b.make(t)
			r := pathCanary(t, lim, 0.5)
			var in, out string
			for i := 0; in == "" || out == ""; i++ {
				if r.Enforced(canaryKey(i)) {
					in = cmpOr(in, canaryKey(i))
				} else {
					out = cmpOr(out, canaryKey(i))
				}
			}
			for _, tc := range []struct {
				root string
				dry  bool
			}{{in, false}, {out, true}} {
				var got []string
				for range 2 {
					res, err := r.Allow(ctx, tc.root, "user:7")
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, strings.Join([]string{boolWord(res.Allowed, "admitted", "denied"), boolWord(res.DryRun, "dry", "enforced"), res.Level}, " "))
				}
				mode := boolWord(tc.dry, "dry", "enforced")
				want := []string{"admitted " + mode + " org", "denied " + mode + " org"}
				if !slices.Equal(got, want) {
					t.Fatalf("root %q: %v, want %v", tc.root, got, want)
				}
			}
		})
	}
}

// TestPathEnforceModes: WithEnforce checks its fraction; DryRun and
// WithPenalty keep the canary; 1 enforces every root and 0 none; a
// dry-run path rule stays one whatever the fraction.
func TestPathEnforceModes(t *testing.T) {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	base, err := lim.PreparePath("api", core.Level{Name: "org", Limits: []core.Limit{core.PerMinute(1)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []float64{math.NaN(), -0.1, 1.1} {
		if _, err := base.WithEnforce(f); err == nil || !strings.Contains(err.Error(), "PathRule.WithEnforce: fraction") {
			t.Errorf("WithEnforce(%v) = %v, want an error naming the fraction", f, err)
		}
	}
	half, _ := base.WithEnforce(0.5)
	pen, err := half.WithPenalty(0)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := base.WithEnforce(1)
	none, _ := base.WithEnforce(0)
	dryAll, _ := base.DryRun().WithEnforce(1)
	differ := 0
	for i := range 1000 {
		root := canaryKey(i)
		if pen.Enforced(root) != half.Enforced(root) || half.DryRun().Enforced(root) {
			t.Fatalf("%q: WithPenalty or DryRun changed the canary", root)
		}
		if !all.Enforced(root) || none.Enforced(root) || dryAll.Enforced(root) || !base.Enforced(root) {
			t.Fatalf("%q: enforced at 1 %v, at 0 %v, dry run at 1 %v, without a canary %v", root, all.Enforced(root), none.Enforced(root), dryAll.Enforced(root), base.Enforced(root))
		}
		if !half.Enforced(root) {
			differ++
		}
	}
	if differ < 400 || differ > 600 {
		t.Fatalf("at 0.5, %d of 1000 roots left in dry run", differ)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func boolWord(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}
