package core

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// shareModel is the model's side of TestPathShareDifferential: every
// bucket and record by its stored name.
type shareModel struct {
	buckets  map[string]*bucket
	parents  map[string]*fairParent
	children map[string]*fairChild
}

func (m *shareModel) bucket(rkey string) *bucket {
	if m.buckets[rkey] == nil {
		m.buckets[rkey] = &bucket{}
	}
	return m.buckets[rkey]
}

// shareOne is one path decision of TestPathShareDifferential.
type shareOne struct {
	path   []string
	rkeys  []string
	args   []any
	gate   *shareGate
	want   decision
	wantLv int
}

// TestPathShareDifferential runs random traffic of children of random
// weights and classes, on paths of one to three levels below a shared
// root (fair share and class floors), alone and in batches, with
// penalties, through path.lua on a real Redis on a virtual clock and
// through the model (stepPathShare); it requires identical decisions,
// reasons and deciding levels, and identical stored buckets and share
// records, after every step.
func TestPathShareDifferential(t *testing.T) {
	const seqs, perSeq = 6, 900
	lim, err := NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	rule, err := lim.PreparePath("sharediff",
		Level{Name: "up", Limits: []Limit{{Rate: 50, Period: time.Second, Burst: 20}}},
		Level{Name: "tenant", Limits: []Limit{PerSecond(15).WithBurst(5)}},
		Level{Name: "user", Limits: []Limit{PerSecond(6).WithBurst(3), PerMinute(150)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rdb := redistest.NewClient(t, redistest.Addr(t))
	const base = 1_800_000_000_000_000
	var decisions, fairDenials, classDenials, lowerDenials, batched int
	for seq := range seqs {
		r := rand.New(rand.NewPCG(uint64(seq)+7, 49))
		prefix := fmt.Sprintf("%s%d:", uniquePrefix(), seq)
		m := &shareModel{buckets: map[string]*bucket{}, parents: map[string]*fairParent{}, children: map[string]*fairChild{}}
		window := []int64{200_000, 1_000_000, 3_000_000}[seq%3]
		weights := map[string]int64{}
		now := base + int64(seq)*86400_000_000
		for step := range perSeq {
			switch x := r.IntN(100); {
			case x < 45:
			case x < 90:
				now += r.Int64N(40_000)
			case x < 99:
				now += r.Int64N(window)
			default:
				now += r.Int64N(4 * window)
			}
			var batch []*shareOne
			for range 1 + r.IntN(3) {
				o := &shareOne{}
				depth := 1 + r.IntN(3)
				if r.IntN(5) > 0 {
					depth = max(depth, 2)
				}
				tenant := fmt.Sprintf("t%d", r.IntN(5))
				o.path = []string{fmt.Sprintf("up%d", r.IntN(2)), tenant, fmt.Sprintf("u%d", r.IntN(2))}[:depth]
				if _, ok := weights[tenant]; !ok || r.IntN(50) == 0 {
					weights[tenant] = 1 + r.Int64N(4)
				}
				child := ""
				if depth > 1 {
					child = tenant
				}
				o.gate = &shareGate{Level: 0, Fair: r.IntN(8) > 0, Weight: weights[child] + 0, Window: window, Contend: 10, Floor: []int64{0, 0, 4, 10}[r.IntN(4)]}
				if o.gate.Weight == 0 {
					o.gate.Weight = 1
				}
				cost := int64(1)
				if r.IntN(4) == 0 {
					cost = 1 + r.Int64N(3)
				}
				var penalty int64
				if r.IntN(15) == 0 {
					penalty = 1 + r.Int64N(2_000_000)
				}
				o.args = []any{depth}
				var bs []*bucket
				var levels [][]tickLimit
				for lv := range depth {
					p := rule.plans[lv]
					o.rkeys = append(o.rkeys, redisstore.RedisKeyFrom(prefix, p.FP, o.path[0], pathKeyOf(o.path, lv), nil))
					bs = append(bs, m.bucket(o.rkeys[lv]))
					levels = append(levels, p.Ticks)
					c := redisstore.Query{Plan: &p.Plan, Cost: cost, Penalty: penalty, Now: now}
					o.args = c.AppendGroup(o.args)
				}
				pk, ck := redisstore.ShareKeys(o.rkeys, 0)
				o.rkeys = append(o.rkeys, pk, ck)
				o.args = redisstore.AppendShare(o.args, o.gate)
				if m.parents[pk] == nil {
					m.parents[pk] = &fairParent{}
				}
				if m.children[ck] == nil {
					m.children[ck] = &fairChild{}
				}
				o.want, o.wantLv, _ = stepPathShare(bs, now, levels, cost, 0, penalty, o.gate, m.parents[pk], m.children[ck])
				batch = append(batch, o)
			}
			var keys []string
			var args []any
			if len(batch) == 1 {
				keys, args = batch[0].rkeys, batch[0].args
			} else {
				args = []any{"0", len(batch)}
				for _, o := range batch {
					keys = append(keys, o.rkeys...)
					args = append(append(args, len(o.args)), o.args...)
				}
			}
			vals, err := injectedPathScript.Run(ctx, rdb, keys, append(args, now)...).Int64Slice()
			if err != nil {
				t.Fatalf("seq %d step %d: %v", seq, step, err)
			}
			if len(vals) != redisstore.PathReplyWidth*len(batch)+redisstore.ReplyTime {
				t.Fatalf("seq %d step %d: %d values for %d paths", seq, step, len(vals), len(batch))
			}
			for i, o := range batch {
				got, gotLv, err := redisstore.ParsePathReply(vals[i*redisstore.PathReplyWidth:(i+1)*redisstore.PathReplyWidth], rule.views[:len(o.path)])
				if err != nil {
					t.Fatalf("seq %d step %d: %v", seq, step, err)
				}
				if got != o.want || gotLv != o.wantLv {
					t.Fatalf("seq %d step %d path %d of %d (path %v, gate %+v): script %+v level %d, model %+v level %d", seq, step, i, len(batch), o.path, *o.gate, got, gotLv, o.want, o.wantLv)
				}
				decisions++
				if len(batch) > 1 {
					batched++
				}
				switch {
				case got.Reason == reasonFair:
					fairDenials++
				case got.Reason == reasonClass:
					classDenials++
				case !got.Allowed && gotLv > 0:
					lowerDenials++
				}
			}
			for _, o := range batch {
				if !o.gate.Fair {
					continue
				}
				// The records expire when the model says (stretched by
				// the test's script, less the real time since).
				want := ceilDiv(shareTTL(now, o.gate), 1000) + expiryStretch.Milliseconds()
				for _, k := range o.rkeys[len(o.rkeys)-2:] {
					if px := rdb.PTTL(ctx, k).Val().Milliseconds(); px > want || px < want-5000 {
						t.Fatalf("seq %d step %d: %s expires in %d ms, want %d (less the real time since)", seq, step, k, px, want)
					}
				}
			}
			checkShareStored(t, ctx, rdb, m, fmt.Sprintf("seq %d step %d", seq, step))
		}
	}
	t.Logf("%d decisions (%d in batches): %d denied for fair share, %d for a class's reserve, %d below the shared level; identical to the model", decisions, batched, fairDenials, classDenials, lowerDenials)
	if decisions < 5000 || fairDenials < 100 || classDenials < 100 || lowerDenials < 100 || batched == 0 {
		t.Fatal("too few decisions, or the traffic never met a gate or a lower level: the test proves nothing")
	}
}

// checkShareStored fails unless every bucket and share record Redis holds
// is the model's.
func checkShareStored(t *testing.T, ctx context.Context, rdb *redis.Client, m *shareModel, at string) {
	t.Helper()
	want := map[string]string{}
	for k, b := range m.buckets {
		if b.set {
			want[k] = formatBucket(b)
		}
	}
	for k, p := range m.parents {
		if p.set {
			want[k] = p.String()
		}
	}
	for k, c := range m.children {
		if c.set {
			want[k] = c.String()
		}
	}
	keys := slices.Sorted(maps.Keys(want))
	if len(keys) == 0 {
		return
	}
	vals, err := rdb.MGet(ctx, keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if v, _ := vals[i].(string); v != want[k] {
			t.Fatalf("%s: %s holds %q, model %q", at, k, v, want[k])
		}
	}
}

// TestShareModelMaxMin runs the model alone (stepPathShare on a parent of
// 1,000/s, burst 100, a 1 s window) for 10 s of Poisson traffic from
// three children offering 50/s, 400/s and 5,000/s: max-min gives them
// 50, 400 and the remaining 550. The two that ask less than an equal
// share of what is left get at least 97% of what they offered, and the
// parent admits at least 99% of what it allows.
func TestShareModelMaxMin(t *testing.T) {
	lim, err := NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	pr, err := lim.PreparePath("maxmin", Level{Name: "up", Limits: []Limit{{Rate: 1000, Period: time.Second, Burst: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	levels := [][]tickLimit{pr.plans[0].Ticks}
	b, p := &bucket{}, &fairParent{}
	rates := []float64{50, 400, 5000}
	children := []*fairChild{{}, {}, {}}
	type arrival struct {
		at    int64
		child int
	}
	r := rand.New(rand.NewPCG(1, 2))
	var arrivals []arrival
	const d = 10_000_000
	for k, rate := range rates {
		for at := int64(r.ExpFloat64() * 1e6 / rate); at < d; at += int64(r.ExpFloat64() * 1e6 / rate) {
			arrivals = append(arrivals, arrival{at, k})
		}
	}
	slices.SortFunc(arrivals, func(a, b arrival) int { return int(a.at - b.at) })
	got, offered := make([]int, 3), make([]int, 3)
	const t0 = 1_800_000_000_000_000
	for _, a := range arrivals {
		g := &shareGate{Fair: true, Weight: 1, Window: 1_000_000, Contend: 50}
		dec, _, _ := stepPathShare([]*bucket{b}, t0+a.at, levels, 1, 0, 0, g, p, children[a.child])
		offered[a.child]++
		if dec.Allowed {
			got[a.child]++
		}
	}
	t.Logf("offered %v, admitted %v", offered, got)
	for k := range 2 {
		if got[k]*100 < offered[k]*97 {
			t.Errorf("child %d (%.0f/s): %d of %d admitted, want at least 97%%", k, rates[k], got[k], offered[k])
		}
	}
	if total := got[0] + got[1] + got[2]; total*100 < 99*10_100 {
		t.Errorf("%d admitted in all, want at least 99%% of the 10,100 the parent allows", total)
	}
}
