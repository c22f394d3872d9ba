package core_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// canaryKeys is how many keys the canary tests pick from.
const canaryKeys = 10_000

func canaryKey(i int) string { return "tenant:" + strconv.Itoa(i) }

// canaryBackend makes limiters of one kind for the canary tests: each call
// a new instance (a replica, or the same one after a restart), all of them
// sharing the store where there is one.
type canaryBackend struct {
	name string
	make func(t *testing.T, opts ...core.Option) *core.Limiter
}

func canaryBackends(t *testing.T) []canaryBackend {
	t.Helper()
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("canary%d:", time.Now().UnixNano())
	return []canaryBackend{
		{"memory", func(t *testing.T, opts ...core.Option) *core.Limiter {
			lim, err := core.NewMemory(opts...)
			if err != nil {
				t.Fatal(err)
			}
			return lim
		}},
		{"redis", func(t *testing.T, opts ...core.Option) *core.Limiter {
			rdb := redistest.NewClient(t, srv.Addr())
			opts = append([]core.Option{core.WithPrefix(prefix), core.WithTimeout(10 * time.Second)}, opts...)
			lim, err := core.New(rdb, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lim.Close() })
			return lim
		}},
	}
}

// enforcedSet returns the keys of 0..canaryKeys-1 that rule decides as
// enforced, found by deciding each once and reading Result.DryRun, and
// checks that Rule.Enforced says the same of each.
func enforcedSet(t *testing.T, rule *core.Rule) []int {
	t.Helper()
	ctx := context.Background()
	var set []int
	for i := range canaryKeys {
		res, err := rule.Allow(ctx, canaryKey(i))
		if err != nil {
			t.Fatal(err)
		}
		if res.DryRun == rule.Enforced(canaryKey(i)) {
			t.Fatalf("Allow(%q).DryRun = %v, but Enforced = %v", canaryKey(i), res.DryRun, !res.DryRun)
		}
		if !res.DryRun {
			set = append(set, i)
		}
	}
	return set
}

// TestEnforceCanary is issue #51's canary: at 10% over 10⁴ keys, 10% ± 1%
// are enforced; three instances enforce the same set, and so do three
// new instances (a restart); a key enforced at 5% is enforced at 20%. On
// NewMemory and on a real Redis, without and with WithSlotKey.
func TestEnforceCanary(t *testing.T) {
	secret := []byte("0123456789abcdef-canary-secret")
	for _, b := range canaryBackends(t) {
		for _, keyed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/keyed=%v", b.name, keyed), func(t *testing.T) {
				var opts []core.Option
				if keyed {
					opts = append(opts, core.WithSlotKey(secret))
				}
				at := func(lim *core.Limiter, fraction float64) *core.Rule {
					t.Helper()
					r, err := lim.PrepareScoped(fmt.Sprintf("keyed=%v", keyed), core.PerHour(1000))
					if err != nil {
						t.Fatal(err)
					}
					if r, err = r.WithEnforce(fraction); err != nil {
						t.Fatal(err)
					}
					return r
				}
				var want []int
				for life := range 2 { // the second life is after a restart
					for inst := range 3 {
						got := enforcedSet(t, at(b.make(t, opts...), 0.10))
						if life == 0 && inst == 0 {
							want = got
							if n := len(got); n < 900 || n > 1100 {
								t.Fatalf("WithEnforce(0.10) enforced %d of %d keys, want 900 to 1100", n, canaryKeys)
							}
							continue
						}
						if !slices.Equal(got, want) {
							t.Fatalf("life %d, instance %d: %d keys enforced, not the %d of the first instance", life, inst, len(got), len(want))
						}
					}
				}
				lim := b.make(t, opts...)
				at5, at20 := at(lim, 0.05), at(lim, 0.20)
				n5, n20 := 0, 0
				for i := range canaryKeys {
					e5, e20 := at5.Enforced(canaryKey(i)), at20.Enforced(canaryKey(i))
					if e5 && !e20 {
						t.Fatalf("%q is enforced at 5%% but not at 20%%", canaryKey(i))
					}
					if e5 {
						n5++
					}
					if e20 {
						n20++
					}
				}
				if n5 < 400 || n5 > 600 || n20 < 1800 || n20 > 2200 {
					t.Fatalf("enforced %d keys at 5%% and %d at 20%% of %d", n5, n20, canaryKeys)
				}
			})
		}
	}
}

// TestEnforceStable: which keys a canary enforces is fixed by the key and
// the slot key alone, in every process and build: these were computed
// once (and checked with Python's hmac: HMAC-SHA256, its first 8 bytes
// big-endian below 0.1·2⁶⁴), and must never change: a change would move
// keys in or out of every canary in a fleet whose replicas run different
// versions.
func TestEnforceStable(t *testing.T) {
	tests := []struct {
		name string
		opts []core.Option
		want []int // the keys enforced at 10% among tenant:0..99
	}{
		{"salt", nil, []int{4, 9, 31, 60, 70, 90, 93, 97}},
		{"slot key", []core.Option{core.WithSlotKey([]byte("0123456789abcdef"))}, []int{3, 13, 18, 50, 81, 86, 89, 95}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := core.NewMemory(tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			r, _ := lim.Prepare(core.PerMinute(1))
			r, err = r.WithEnforce(0.10)
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for i := range 100 {
				if r.Enforced(canaryKey(i)) {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("enforced at 10%% = %#v, want %#v", got, tt.want)
			}
		})
	}
}

// TestEnforceMonotonic: every key enforced at a fraction is enforced at
// every larger one; 0 enforces none and 1 all.
func TestEnforceMonotonic(t *testing.T) {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	base, _ := lim.Prepare(core.PerMinute(1))
	fractions := []float64{0, 0.001, 0.01, 0.05, 0.1, 0.2, 0.5, 0.9, 0.999, math.Nextafter(1, 0), 1}
	rules := make([]*core.Rule, len(fractions))
	for i, f := range fractions {
		if rules[i], err = base.WithEnforce(f); err != nil {
			t.Fatal(err)
		}
	}
	for k := range canaryKeys {
		key := canaryKey(k)
		for i := 1; i < len(rules); i++ {
			if rules[i-1].Enforced(key) && !rules[i].Enforced(key) {
				t.Fatalf("%q is enforced at %v but not at %v", key, fractions[i-1], fractions[i])
			}
		}
		if rules[0].Enforced(key) || !rules[len(rules)-1].Enforced(key) {
			t.Fatalf("%q: Enforced at 0 = %v, at 1 = %v", key, rules[0].Enforced(key), rules[len(rules)-1].Enforced(key))
		}
	}
}

// TestEnforceInvalid: a fraction that is NaN or outside [0, 1] is refused.
func TestEnforceInvalid(t *testing.T) {
	lim, _ := core.NewMemory()
	r, _ := lim.Prepare(core.PerMinute(1))
	for _, f := range []float64{math.NaN(), -0.01, 1.01, math.Inf(1), math.Inf(-1)} {
		if got, err := r.WithEnforce(f); err == nil || got != nil {
			t.Errorf("WithEnforce(%v) = %v, %v; want an error", f, got, err)
		}
	}
}

// decisionLog is an Observer that keeps the decisions it is told of.
type decisionLog struct {
	mu  sync.Mutex
	res []core.Result
}

func (o *decisionLog) ObserveDecision(res core.Result, _ core.Source) {
	o.mu.Lock()
	o.res = append(o.res, res)
	o.mu.Unlock()
}
func (o *decisionLog) ObserveStore(core.StoreCall)       {}
func (o *decisionLog) ObserveDegraded(core.StoreOutage)  {}
func (o *decisionLog) ObserveRecovered(core.StoreOutage) {}

func (o *decisionLog) last() core.Result {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.res[len(o.res)-1]
}

// keyOf returns the first key from tenant:from on that r enforces, or
// leaves in dry run.
func keyOf(r *core.Rule, enforced bool, from int) string {
	for i := from; ; i++ {
		if r.Enforced(canaryKey(i)) == enforced {
			return canaryKey(i)
		}
	}
}

// TestEnforceDecides: a key the canary enforces is denied as usual; one it
// does not is decided as in a dry run: charged, denied in its Result
// (marked DryRun), and observed so; the modes pass through DryRun and
// WithPenalty; a rule's dry run stays whole under a canary.
func TestEnforceDecides(t *testing.T) {
	obs := &decisionLog{}
	lim, err := core.NewMemory(core.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	base, _ := lim.Prepare(core.PerMinute(2))
	canary, err := base.WithEnforce(0.5)
	if err != nil {
		t.Fatal(err)
	}
	in, out := keyOf(canary, true, 0), keyOf(canary, false, 0)
	for _, tc := range []struct {
		key     string
		dryRun  bool
		allowed []bool
	}{
		{in, false, []bool{true, true, false}},
		{out, true, []bool{true, true, false}},
	} {
		for i, want := range tc.allowed {
			res, err := canary.Allow(ctx, tc.key)
			if err != nil || res.Allowed != want || res.DryRun != tc.dryRun {
				t.Fatalf("decision %d of %q = %+v, %v; want Allowed %v, DryRun %v", i, tc.key, res, err, want, tc.dryRun)
			}
			if o := obs.last(); o.Allowed != want || o.DryRun != tc.dryRun {
				t.Fatalf("decision %d of %q observed as %+v", i, tc.key, o)
			}
		}
		// The same bucket as the rule without the canary: charged.
		if res, _ := base.Allow(ctx, tc.key); res.Allowed || res.DryRun {
			t.Fatalf("the plain rule's decision of %q = %+v, want a denial", tc.key, res)
		}
	}
	pen, err := canary.WithPenalty(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	dry, err := canary.DryRun()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{in, out} {
		if pen.Enforced(k) != canary.Enforced(k) || dry.Enforced(k) {
			t.Fatalf("%q: WithPenalty's Enforced = %v, DryRun's = %v; canary's = %v", k, pen.Enforced(k), dry.Enforced(k), canary.Enforced(k))
		}
	}
	all, _ := canary.WithEnforce(1)
	if !all.Enforced(out) || !base.Enforced(out) {
		t.Fatal("WithEnforce(1) or a rule without a canary leaves a key in dry run")
	}
}
