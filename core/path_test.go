package core

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/redistest"
)

// injectedPathScript is path.lua on the test's clock, as
// injectedTimeScript is bucket.lua: the instant comes as an extra last
// argument, every expiry is stretched by expiryStretch, and each is
// recorded under the key's name plus pxSuffix.
var injectedPathScript = func() *redis.Script {
	if !strings.Contains(pathLua, timeLines) {
		panic("path.lua no longer reads TIME as the test expects")
	}
	src := strings.Replace(pathLua, timeLines, "local now = ARGV[#ARGV] + 0\nARGV[#ARGV] = nil\n", 1)
	sets := regexp.MustCompile(`call\('SET', (KEYS\[\w+\]), (.+?), 'PX', ceildiv\(([\w.]+), 1000\)\)`)
	if n := len(sets.FindAllString(src, -1)); n != 4 {
		panic(fmt.Sprintf("path.lua sets %d keys with an expiry, the test expects 4", n))
	}
	src = sets.ReplaceAllString(src, fmt.Sprintf("call('SET', $1, $2, 'PX', ceildiv($3, 1000) + %d) call('SET', $1 .. '%s', ceildiv($3, 1000), 'PX', %[1]d)",
		expiryStretch.Milliseconds(), pxSuffix))
	return redis.NewScript(src)
}()

// pathDiffRules are the paths the differential test draws from: four
// continuous levels (so reservations can be settled), and a tree of
// calendar, interval and continuous levels.
var pathDiffRules = [][]Level{
	{
		{Name: "org", Limits: []Limit{{Rate: 400, Period: time.Hour, Burst: 40}}},
		{Name: "team", Limits: []Limit{PerSecond(10).WithBurst(3), PerMinute(40)}},
		{Name: "user", Limits: []Limit{{Rate: 7, Period: 1500 * time.Millisecond, Burst: 4}}},
		{Name: "key", Limits: []Limit{PerSecond(5)}},
	},
	{
		{Name: "org", Limits: []Limit{PerCalendarMonth(300, "Asia/Tokyo")}},
		{Name: "team", Limits: []Limit{PerInterval(8, 2*time.Second), PerMinute(30)}},
		{Name: "user", Limits: []Limit{{Rate: 3, Period: time.Second, Burst: 2}}},
		{Name: "key", Limits: []Limit{PerCalendarDay(20, "America/New_York"), PerSecond(4)}},
	},
}

// pathRes is a reservation in TestPathDifferential.
type pathRes struct {
	rule    int
	path    []string
	id      string
	n       int64
	settled bool
}

// TestPathDifferential runs random traffic on random paths of one to four
// levels, with penalties and, on the continuous rule, reservations settled
// at random, through path.lua (and settle.lua) on a real Redis on a
// virtual clock, and through the model (stepPath, settleBucket); it
// requires identical decisions and deciding levels, identical stored
// values at every level after every step, and the expiry the model wants
// at every level written.
func TestPathDifferential(t *testing.T) {
	const seqs, perSeq = 6, 700
	lim, err := NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	rules := make([]*PathRule, len(pathDiffRules))
	for i, lv := range pathDiffRules {
		if rules[i], err = lim.PreparePath("diff", lv...); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	rdb := redistest.NewClient(t, redistest.Addr(t))
	const base = 1_800_000_000_000_000
	decisions, denials, settled, upperDenials := 0, 0, 0, 0
	for seq := range seqs {
		r := rand.New(rand.NewPCG(uint64(seq)+1, 31))
		prefix := fmt.Sprintf("%s%d:", uniquePrefix(), seq)
		model := map[string]*bucket{}
		modelOf := func(rkey string) *bucket {
			b := model[rkey]
			if b == nil {
				b = &bucket{}
				model[rkey] = b
			}
			return b
		}
		var open []*pathRes
		now := base + int64(seq)*40*86400_000_000
		for step := range perSeq {
			switch x := r.IntN(100); {
			case x < 40:
			case x < 80:
				now += r.Int64N(100_000)
			case x < 99:
				now += r.Int64N(2_000_000)
			default:
				now += r.Int64N(3 * 3600_000_000)
			}
			if len(open) > 0 && r.IntN(4) == 0 {
				// Settle an open reservation at random.
				i := r.IntN(len(open))
				rv := open[i]
				open = slices.Delete(open, i, i+1)
				rule := rules[rv.rule]
				final := r.Int64N(rv.n + rule.minB + 1)
				keys, args := []string{}, []any{}
				if len(rv.path) > 1 {
					args = append(args, "0") // ngroups, set below
				}
				var each []any
				for lv := range rv.path {
					p := rule.plans[lv]
					rkey := redisKeyFrom(prefix, p.fp, rv.path[0], pathKeyOf(rv.path, lv), nil)
					keys = append(keys, rkey, markerKey(rkey, prefix, p.fp, rv.id))
					if len(rv.path) == 1 {
						args = append(args, final-rv.n, 600000)
						args = append(args, p.args...)
					} else {
						args = append(args, p.args...)
						each = append(each, final-rv.n, 600000, lv+1)
					}
					settleBucket(modelOf(rkey), now, p.ticks, final-rv.n)
				}
				if len(rv.path) > 1 {
					args[0] = len(rv.path)
				}
				args = append(append(args, each...), now)
				if err := injectedSettleScript.Run(ctx, rdb, keys, args...).Err(); err != nil {
					t.Fatalf("seq %d step %d: settle: %v", seq, step, err)
				}
				settled++
			} else {
				ri := r.IntN(len(rules))
				rule := rules[ri]
				depth := 1 + r.IntN(len(rule.plans))
				path := []string{fmt.Sprintf("org%d", r.IntN(2)), fmt.Sprintf("team%d", r.IntN(2)), fmt.Sprintf("user%d", r.IntN(2)), fmt.Sprintf("key%d", r.IntN(2))}[:depth]
				cost := int64(1)
				if r.IntN(4) == 0 {
					cost = 1 + r.Int64N(2)
				}
				var penalty int64
				if r.IntN(12) == 0 {
					penalty = 1 + r.Int64N(3_000_000)
				}
				rkeys := make([]string, depth)
				bs := make([]*bucket, depth)
				levels := make([][]tickLimit, depth)
				args := []any{depth}
				for lv := range depth {
					p := rule.plans[lv]
					rkeys[lv] = redisKeyFrom(prefix, p.fp, path[0], pathKeyOf(path, lv), nil)
					bs[lv] = modelOf(rkeys[lv])
					levels[lv] = p.ticks
					c := call{plan: p, cost: cost, penalty: penalty, now: now}
					args = c.appendGroup(args)
				}
				want, wantLv, wrote := stepPath(bs, now, levels, cost, 0, penalty)
				vals, err := injectedPathScript.Run(ctx, rdb, rkeys, append(args, now)...).Int64Slice()
				if err != nil {
					t.Fatalf("seq %d step %d: %v", seq, step, err)
				}
				got, gotLv, err := parsePathReply(vals, rule.plans[:depth])
				if err != nil {
					t.Fatalf("seq %d step %d: %v", seq, step, err)
				}
				if got != want || gotLv != wantLv {
					t.Fatalf("seq %d step %d (rule %d, path %v, cost %d, penalty %d): script %+v level %d, model %+v level %d", seq, step, ri, path, cost, penalty, got, gotLv, want, wantLv)
				}
				decisions++
				if !got.allowed {
					denials++
					if wantLv > 0 {
						upperDenials++
					}
				}
				for lv, w := range wrote {
					if !w {
						continue
					}
					px, err := rdb.Get(ctx, rkeys[lv]+pxSuffix).Int64()
					if err != nil {
						t.Fatal(err)
					}
					if wantMS := ceilDiv(bs[lv].ttl(now, levels[lv]), 1000); px != wantMS {
						t.Fatalf("seq %d step %d level %d: expiry %d ms, model %d ms", seq, step, lv, px, wantMS)
					}
				}
				if got.allowed && ri == 0 && r.IntN(2) == 0 {
					open = append(open, &pathRes{rule: ri, path: path, id: fmt.Sprintf("r%d", step), n: cost})
				}
			}
			// Every level's stored value is the model's.
			rkeys := slices.Collect(maps.Keys(model))
			vals, err := rdb.MGet(ctx, rkeys...).Result()
			if err != nil {
				t.Fatal(err)
			}
			for i, rkey := range rkeys {
				v, _ := vals[i].(string)
				if b := model[rkey]; b.set && v != formatBucket(b) {
					t.Fatalf("seq %d step %d: %s holds %q, model %q", seq, step, rkey, v, formatBucket(b))
				}
			}
		}
	}
	t.Logf("%d path decisions (%d denied, %d of them at a level below the root) and %d settlements identical to the model at every level", decisions, denials, upperDenials, settled)
	if denials == 0 || upperDenials == 0 || settled == 0 {
		t.Fatal("the traffic never denied below the root, or never settled: the test proves nothing")
	}
}
