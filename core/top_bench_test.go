package core

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// topKeys are the benchmarks' keys: more than a sketch's counters, so
// that counters are taken over as they are in production.
var topKeys = func() []string {
	ks := make([]string, 4096)
	for i := range ks {
		ks[i] = "tenant:" + strconv.Itoa(i)
	}
	return ks
}()

// BenchmarkTopDecision is a decision of an in-memory limiter (Allow of a
// named limit over 4096 keys, every 8th denied) without top talkers, with
// them, and with them keeping names: the difference is the sketch's cost
// per decision, and allocs/op must stay 0. bench/README.md ("Top
// talkers") has the command.
func BenchmarkTopDecision(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"off", nil},
		{"on", []Option{WithTopTalkers(TopTalkers{})}},
		{"names", []Option{WithTopTalkers(TopTalkers{Names: true})}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lim, err := NewMemory(tc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer lim.Close()
			rule, err := lim.Prepare(Limit{Name: "api", Rate: 1000, Period: time.Second, Burst: 1})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				if _, err := rule.Allow(ctx, topKeys[i&4095]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTopDenyCacheHit is a Redis-backed limiter's denial answered
// by its deny cache (the decision a flooding key gets), without top
// talkers and with them: the denials top talkers count most, on a limiter
// that keeps its buckets in a real Redis; allocs/op must stay 0.
func BenchmarkTopDenyCacheHit(b *testing.B) {
	srv := redistest.Start(b)
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"off", nil},
		{"on", []Option{WithTopTalkers(TopTalkers{})}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lim, err := New(redistest.NewClient(b, srv.Addr()), append(tc.opts, WithFallbackReplicas(1))...)
			if err != nil {
				b.Fatal(err)
			}
			defer lim.Close()
			ctx := context.Background()
			limit := PerHour(1).WithName("login")
			lim.Allow(ctx, "abuser", limit)
			b.ReportAllocs()
			for b.Loop() {
				if res, _ := lim.Allow(ctx, "abuser", limit); res.Allowed {
					b.Fatal("admitted")
				}
			}
		})
	}
}

// BenchmarkTopRecord is the sketch's own work per decision: a hash and a
// counter's update, every 8th a denial. "uniform" cycles over 4096 keys,
// the worst case (nearly every event takes a counter over); "zipf" draws
// keys by Zipf(1.1), as traffic is shaped, where heavy keys hold their
// counters.
func BenchmarkTopRecord(b *testing.B) {
	zipf := make([]string, 1<<16)
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, uint64(len(topKeys)-1))
	for i := range zipf {
		zipf[i] = topKeys[z.Uint64()]
	}
	uniform := make([]string, 1<<16)
	for i := range uniform {
		uniform[i] = topKeys[(i*7)&4095]
	}
	for _, tc := range []struct {
		name string
		keys []string
	}{{"uniform", uniform}, {"zipf", zipf}} {
		b.Run(tc.name, func(b *testing.B) {
			t, _ := newTopTalkers(TopTalkers{})
			refs := t.refs([]Limit{{Name: "api"}})
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				refs.record(tc.keys[i&(1<<16-1)], i&7 != 0, 1, 0)
			}
		})
	}
}

// TestTopRecordAllocs holds the decision path with top talkers on, names
// kept or not, to zero allocations: the sketch's update and a whole
// in-memory decision.
func TestTopRecordAllocs(t *testing.T) {
	for _, names := range []bool{false, true} {
		tt, _ := newTopTalkers(TopTalkers{Names: names})
		refs := tt.refs([]Limit{{Name: "api"}, {Name: "other"}})
		i := 0
		if n := testing.AllocsPerRun(5000, func() {
			i++
			refs.record(topKeys[(i*7)&4095], i&3 != 0, 2, i&1)
		}); n != 0 {
			t.Errorf("names %v: %v allocations per record, want 0", names, n)
		}
		lim, err := NewMemory(WithTopTalkers(TopTalkers{Names: names}))
		if err != nil {
			t.Fatal(err)
		}
		rule, err := lim.Prepare(Limit{Name: "api", Rate: 1, Period: time.Hour, Burst: 2})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, k := range topKeys { // the limiter's maps hold every key first
			rule.Allow(ctx, k)
		}
		if n := testing.AllocsPerRun(5000, func() {
			i++
			rule.Allow(ctx, topKeys[(i*7)&4095])
		}); n != 0 {
			t.Errorf("names %v: %v allocations per decision, want 0", names, n)
		}
		lim.Close()
	}
}
