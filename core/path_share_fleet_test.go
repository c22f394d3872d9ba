package core

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// shareFleet is three limiters on one real Redis, each with its own
// client, deciding on one virtual clock, and one path rule on each.
type shareFleet struct {
	now   time.Time
	rules []*PathRule
}

// newShareFleet prepares levels on three limiters of one prefix.
func newShareFleet(t *testing.T, levels ...Level) *shareFleet {
	t.Helper()
	addr := redistest.Addr(t)
	f := &shareFleet{now: time.Unix(1_800_000_000, 0)}
	prefix := uniquePrefix()
	for range 3 {
		lim := newClockLimiter(t, addr, &f.now, WithPrefix(prefix))
		r, err := lim.PreparePath("fleet", levels...)
		if err != nil {
			t.Fatal(err)
		}
		f.rules = append(f.rules, r)
	}
	return f
}

// offer is one tenant's traffic: a request every gap, from phase on.
type offer struct {
	tenant string
	gap    time.Duration
	phase  time.Duration
}

// run sends the offers for d, in time order, each request on the next
// limiter in turn, and returns each tenant's admitted and offered
// requests and the instants (microseconds from the start) of every
// admission.
func (f *shareFleet) run(t *testing.T, rules []*PathRule, d time.Duration, offers ...offer) (got, offered map[string]int, at []int64) {
	t.Helper()
	ctx := context.Background()
	type req struct {
		at     time.Duration
		tenant string
	}
	var reqs []req
	for _, o := range offers {
		for x := o.phase; x < d; x += o.gap {
			reqs = append(reqs, req{x, o.tenant})
		}
	}
	slices.SortStableFunc(reqs, func(a, b req) int { return int(a.at - b.at) })
	got, offered = map[string]int{}, map[string]int{}
	start := f.now
	for i, q := range reqs {
		f.now = start.Add(q.at)
		res, err := rules[i%len(rules)].Allow(ctx, "upstream", q.tenant)
		if err != nil {
			t.Fatal(err)
		}
		if res.Degraded {
			t.Fatalf("request %d decided locally: %+v", i, res)
		}
		offered[q.tenant]++
		if res.Allowed {
			got[q.tenant]++
			at = append(at, q.at.Microseconds())
		}
	}
	f.now = start.Add(d)
	return got, offered, at
}

// maxOverWindow returns the largest excess, over every window of the
// admissions at (sorted, microseconds), of the admitted count over
// rate per second times the window's length: at most burst + 1 if the
// parent never admitted more than Burst + rate*t + 1 in any window.
func maxOverWindow(at []int64, rate float64) float64 {
	best, minPrefix := 0.0, 0.0
	for j, x := range at {
		v := float64(j) - rate*float64(x)/1e6
		if j == 0 || v < minPrefix {
			minPrefix = v
		}
		best = max(best, v-minPrefix+1)
	}
	return best
}

// upstreamLevels is the done-when's parent: 1,000/s, burst 100, shared
// fairly among tenants (whose own limit never binds).
func upstreamLevels(weights map[string]int, classes ...Class) []Level {
	return []Level{
		{Name: "upstream", Limits: []Limit{{Rate: 1000, Period: time.Second, Burst: 100}}, Share: &Share{Fair: len(classes) == 0, Weights: weights, Classes: classes}},
		{Name: "tenant", Limits: []Limit{PerSecond(100_000)}},
	}
}

// TestFairShareHogAndNine: a parent of 1,000/s (burst 100) shared fairly
// by ten tenants over three limiters for 10 s, one offering 5,000/s and
// nine 100/s each: each small tenant gets at least 95% of what it
// offered, the parent never admits more than Burst + rate*t + 1 in any
// window, and it admits at least 97% of what it allows.
func TestFairShareHogAndNine(t *testing.T) {
	f := newShareFleet(t, upstreamLevels(nil)...)
	offers := []offer{{"hog", 200 * time.Microsecond, 0}}
	for i := range 9 {
		offers = append(offers, offer{fmt.Sprintf("small%d", i), 10 * time.Millisecond, time.Duration(i*1013) * time.Microsecond})
	}
	const d = 10 * time.Second
	got, offered, at := f.run(t, f.rules, d, offers...)
	t.Logf("admitted %v of offered %v", got, offered)
	for i := range 9 {
		k := fmt.Sprintf("small%d", i)
		if got[k]*100 < offered[k]*95 {
			t.Errorf("%s: %d of %d admitted, want at least 95%%", k, got[k], offered[k])
		}
	}
	if over := maxOverWindow(at, 1000); over > 100+1 {
		t.Errorf("the parent admitted %.1f over rate*t in some window, want at most Burst+1 = 101", over)
	}
	allows := 100 + 1000*d.Seconds()
	if float64(len(at)) < 0.97*allows {
		t.Errorf("%d admitted in all, want at least 97%% of the %.0f the parent allows", len(at), allows)
	}
}

// TestFairShareHogAloneAndWeights: a hog alone gets at least 97% of the
// parent (no share is kept idle for tenants that do not ask); two hogs
// weighted 3:1 get 3:1 of it, within 5%.
func TestFairShareHogAloneAndWeights(t *testing.T) {
	const d = 5 * time.Second
	allows := 100 + 1000*d.Seconds()
	t.Run("alone", func(t *testing.T) {
		f := newShareFleet(t, upstreamLevels(nil)...)
		got, _, _ := f.run(t, f.rules, d, offer{"hog", 500 * time.Microsecond, 0})
		if float64(got["hog"]) < 0.97*allows {
			t.Errorf("the hog alone got %d, want at least 97%% of the %.0f the parent allows", got["hog"], allows)
		}
	})
	t.Run("3:1", func(t *testing.T) {
		f := newShareFleet(t, upstreamLevels(map[string]int{"gold": 3})...)
		got, _, _ := f.run(t, f.rules, d, offer{"gold", 500 * time.Microsecond, 0}, offer{"basic", 500 * time.Microsecond, 77 * time.Microsecond})
		ratio := float64(got["gold"]) / float64(got["basic"])
		t.Logf("gold %d, basic %d: %.3f", got["gold"], got["basic"], ratio)
		if ratio < 3*0.95 || ratio > 3*1.05 {
			t.Errorf("gold:basic = %d:%d = %.3f, want 3 within 5%%", got["gold"], got["basic"], ratio)
		}
	})
}

// TestShareClassesHoldReserves: classes critical, normal and sheddable
// with reserves of 0, 20% and 50% of the parent's Burst; with sheddable
// requests (5,000/s) saturating the parent, critical ones offered at 20%
// of its rate are admitted at least 99% of the time, and no sheddable
// admission leaves the parent fewer tokens than the reserves above it.
func TestShareClassesHoldReserves(t *testing.T) {
	f := newShareFleet(t, upstreamLevels(nil, Class{"critical", 0}, Class{"normal", 0.2}, Class{"sheddable", 0.5})...)
	var critical, sheddable []*PathRule
	for _, r := range f.rules {
		c, err := r.InClass("critical")
		if err != nil {
			t.Fatal(err)
		}
		s, err := r.InClass("sheddable")
		if err != nil {
			t.Fatal(err)
		}
		critical, sheddable = append(critical, c), append(sheddable, s)
	}
	ctx := context.Background()
	start := f.now
	var offered, admitted, shed, reserveDenials int
	for i := range 20_000 { // 4 s: a sheddable request every 200 µs, a critical one every 5 ms
		f.now = start.Add(time.Duration(i) * 200 * time.Microsecond)
		res, err := sheddable[i%3].Allow(ctx, "upstream", "batch")
		if err != nil {
			t.Fatal(err)
		}
		if res.Class != "sheddable" {
			t.Fatalf("a sheddable request's Result.Class = %q", res.Class)
		}
		if res.Allowed {
			shed++
			if res.Remaining < 20 {
				t.Fatalf("a sheddable request left %d tokens, below the 20 the reserves above it hold", res.Remaining)
			}
		} else if res.Reason == ReasonReserve {
			reserveDenials++
		}
		if i%25 == 0 {
			res, err := critical[(i/25)%3].Allow(ctx, "upstream", "checkout")
			if err != nil {
				t.Fatal(err)
			}
			offered++
			if res.Allowed {
				admitted++
			}
		}
	}
	t.Logf("critical: %d of %d admitted; sheddable: %d admitted, %d refused for the reserves", admitted, offered, shed, reserveDenials)
	if admitted*100 < offered*99 {
		t.Errorf("critical: %d of %d admitted, want at least 99%%", admitted, offered)
	}
	if reserveDenials == 0 || shed < 3000 {
		t.Errorf("sheddable: %d admitted, %d refused for the reserves: the parent was never saturated", shed, reserveDenials)
	}
}
