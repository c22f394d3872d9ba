package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/batch"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// injectedPathScript is path.lua on the test's clock, as
// injectedTimeScript is bucket.lua: the instant comes as an extra last
// argument, every expiry is stretched by expiryStretch, and each is
// recorded under the key's name plus pxSuffix.
var injectedPathScript = redis.NewScript(injectedPathSrc)

// injectedPathSrc is injectedPathScript's source.
var injectedPathSrc = func() string {
	if !strings.Contains(redisstore.PathLua, timeLines) {
		panic("path.lua no longer reads TIME as the test expects")
	}
	src := strings.Replace(redisstore.PathLua, timeLines, "local now = ARGV[#ARGV] + 0\nARGV[#ARGV] = nil\n", 1)
	sets := regexp.MustCompile(`call\('SET', (keys\[\w+\]|key), (.+?), 'PX', (?:format\('%d', ceildiv\(([\w.]+), 1000\)\)|ceildiv\(([\w.]+), 1000\))\)`)
	if n := len(sets.FindAllString(src, -1)); n != 3 {
		panic(fmt.Sprintf("path.lua sets %d keys with an expiry, the test expects 3 (two of its own, one in limits.lua)", n))
	}
	src = sets.ReplaceAllString(src, fmt.Sprintf("call('SET', $1, $2, 'PX', ceildiv(${3}${4}, 1000) + %d) call('SET', $1 .. '%s', ceildiv(${3}${4}, 1000), 'PX', %[1]d)",
		expiryStretch.Milliseconds(), pxSuffix))
	// A shared level's records (see path_share_test.go), stretched too.
	const px = "'PX', px)"
	if strings.Count(src, px) != 2 {
		panic("path.lua no longer writes its two share records as the test expects")
	}
	return strings.ReplaceAll(src, px, fmt.Sprintf("'PX', px + %d)", expiryStretch.Milliseconds()))
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
	rule int
	path []string
	id   string
	n    int64
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
	decisions, denials, settled, upperDenials, batched := 0, 0, 0, 0, 0
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
					rkey := redisstore.RedisKeyFrom(prefix, p.FP, rv.path[0], pathKeyOf(rv.path, lv), nil)
					keys = append(keys, rkey, redisstore.MarkerKey(rkey, prefix, p.FP, rv.id))
					if len(rv.path) == 1 {
						args = append(args, final-rv.n, 600000)
						args = append(args, p.Args...)
					} else {
						args = append(args, p.Args...)
						each = append(each, final-rv.n, 600000, lv+1)
					}
					settleBucket(modelOf(rkey), now, p.Ticks, final-rv.n)
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
				// 1 to 4 paths decided in one call at this instant: the
				// lone form for one, the batch form for more.
				type one struct {
					ri, depth     int
					path          []string
					cost, penalty int64
					rkeys         []string
					bs            []*bucket
					levels        [][]tickLimit
					args          []any
					want          decision
					wantLv        int
					wrote         []bool
				}
				var batch []*one
				for range 1 + r.IntN(4) {
					o := &one{ri: r.IntN(len(rules))}
					rule := rules[o.ri]
					o.depth = 1 + r.IntN(len(rule.plans))
					o.path = []string{fmt.Sprintf("org%d", r.IntN(2)), fmt.Sprintf("team%d", r.IntN(2)), fmt.Sprintf("user%d", r.IntN(2)), fmt.Sprintf("key%d", r.IntN(2))}[:o.depth]
					o.cost = 1
					if r.IntN(4) == 0 {
						o.cost = 1 + r.Int64N(2)
					}
					if r.IntN(12) == 0 {
						o.penalty = 1 + r.Int64N(3_000_000)
					}
					o.args = []any{o.depth}
					for lv := range o.depth {
						p := rule.plans[lv]
						o.rkeys = append(o.rkeys, redisstore.RedisKeyFrom(prefix, p.FP, o.path[0], pathKeyOf(o.path, lv), nil))
						o.bs = append(o.bs, modelOf(o.rkeys[lv]))
						o.levels = append(o.levels, p.Ticks)
						c := redisstore.Query{Plan: &p.Plan, Cost: o.cost, Penalty: o.penalty, Now: now}
						o.args = c.AppendGroup(o.args)
					}
					o.want, o.wantLv, o.wrote = stepPath(o.bs, now, o.levels, o.cost, 0, o.penalty)
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
					got, gotLv, err := redisstore.ParsePathReply(vals[i*redisstore.PathReplyWidth:(i+1)*redisstore.PathReplyWidth], rules[o.ri].views[:o.depth])
					if err != nil {
						t.Fatalf("seq %d step %d: %v", seq, step, err)
					}
					if got != o.want || gotLv != o.wantLv {
						t.Fatalf("seq %d step %d path %d of %d (rule %d, path %v, cost %d, penalty %d): script %+v level %d, model %+v level %d", seq, step, i, len(batch), o.ri, o.path, o.cost, o.penalty, got, gotLv, o.want, o.wantLv)
					}
					decisions++
					if len(batch) > 1 {
						batched++
					}
					if !got.Allowed {
						denials++
						if o.wantLv > 0 {
							upperDenials++
						}
					}
					if o.ri == 0 && got.Allowed && r.IntN(2) == 0 {
						open = append(open, &pathRes{rule: o.ri, path: o.path, id: fmt.Sprintf("r%d-%d", step, i), n: o.cost})
					}
				}
				// The expiries the model wants, of the keys each path
				// wrote (a later path of the batch may have written one
				// again: the last write's).
				last := map[string]int64{}
				for _, o := range batch {
					for lv, w := range o.wrote {
						if w {
							last[o.rkeys[lv]] = ceilDiv(o.bs[lv].ttl(now, o.levels[lv]), 1000)
						}
					}
				}
				for rkey, wantMS := range last {
					px, err := rdb.Get(ctx, rkey+pxSuffix).Int64()
					if err != nil {
						t.Fatal(err)
					}
					if px != wantMS {
						t.Fatalf("seq %d step %d: %s expiry %d ms, model %d ms", seq, step, rkey, px, wantMS)
					}
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
	t.Logf("%d path decisions (%d in batches, %d denied, %d of them at a level below the root) and %d settlements identical to the model at every level", decisions, batched, denials, upperDenials, settled)
	if denials == 0 || upperDenials == 0 || settled == 0 || batched == 0 {
		t.Fatal("the traffic never denied below the root, or never settled: the test proves nothing")
	}
}

// TestPathBatchKeyFault: in a batch, a path that raises an error of its
// own (a calendar quota whose windows, computed on a clock two days off,
// do not hold the server's) fails alone, charging nothing, and the other
// paths are decided; a batch whose every path fails fails.
func TestPathBatchKeyFault(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.NewClient(t, redistest.Addr(t))
	lim, err := NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	r, err := lim.PreparePath("fault", Level{Name: "org", Limits: []Limit{PerHour(10)}}, Level{Name: "user", Limits: []Limit{PerCalendarDay(5, "UTC")}})
	if err != nil {
		t.Fatal(err)
	}
	prefix := uniquePrefix()
	now := time.Now().UnixMicro()
	mk := func(at int64, path ...string) *batch.Member[*redisstore.PathQuery, redisstore.PathAnswer] {
		c := &redisstore.PathQuery{Args: []any{len(path)}, Plans: r.views[:len(path)]}
		for lv, p := range c.Plans {
			c.RKeys = append(c.RKeys, redisstore.RedisKeyFrom(prefix, p.FP, path[0], pathKeyOf(path, lv), nil))
			cl := redisstore.Query{Plan: p, Cost: 1, Now: at}
			c.Args = cl.AppendGroup(c.Args)
		}
		return &batch.Member[*redisstore.PathQuery, redisstore.PathAnswer]{Req: c}
	}
	skewed := now - 2*24*3600*1_000_000
	bad, good := mk(skewed, "acme", "mallory"), mk(now, "acme", "alice")
	_, _, paths := redisstore.New(rdb, redisstore.Config{}, redisstore.Up{}).Senders(false, nil)
	paths(ctx, []*batch.Member[*redisstore.PathQuery, redisstore.PathAnswer]{bad, good})
	if !errors.Is(bad.Err, redisstore.ErrKeyFailed) {
		t.Fatalf("the path whose calendar windows miss the server's clock: %v, want errKeyFailed", bad.Err)
	}
	if good.Err != nil || !good.Res.D.Allowed {
		t.Fatalf("the other path: %+v, %v; want admitted", good.Res, good.Err)
	}
	// The failed path charged nothing: the organisation holds one request.
	org := mk(now, "acme")
	paths(ctx, []*batch.Member[*redisstore.PathQuery, redisstore.PathAnswer]{org})
	if org.Err != nil || org.Res.D.Remaining != 8 {
		t.Fatalf("the organisation after one admitted and one failed path: %+v, %v; want 8 left", org.Res, org.Err)
	}
	both := []*batch.Member[*redisstore.PathQuery, redisstore.PathAnswer]{mk(skewed, "acme", "mallory"), mk(skewed, "acme", "mallory")}
	paths(ctx, both)
	if both[0].Err == nil || !redisstore.KeyFault(both[0].Err) {
		t.Fatalf("a batch whose every path fails: %v, want the script's error, a fault of the key", both[0].Err)
	}
}

// TestPathForeignLevel: a value of another type at a path's level (a hash
// another program wrote) is deleted by path.lua and read as a full
// bucket, so the path is decided by Redis, not by the fallback, alone
// and in a batch; the limiter logs the key and the level once.
func TestPathForeignLevel(t *testing.T) {
	addr := redistest.Start(t).Addr()
	ctx := context.Background()
	rdb := redistest.NewClient(t, addr)
	for lv, name := range []string{"org", "user"} {
		t.Run(name, func(t *testing.T) {
			logs := &logLines{}
			lim := newRedisLimiter(t, addr, WithPrefix(uniquePrefix()), WithLogger(slog.New(logs)))
			r, err := lim.PreparePath("foreign", Level{Name: "org", Limits: []Limit{PerHour(100)}}, Level{Name: "user", Limits: []Limit{PerHour(5)}})
			if err != nil {
				t.Fatal(err)
			}
			rkey := redisstore.RedisKeyFrom(redisOf(lim).Prefix(), r.plans[lv].FP, "acme", pathKeyOf([]string{"acme", "mallory"}, lv), nil)
			for round := range 2 {
				if err := rdb.Del(ctx, rkey).Err(); err != nil {
					t.Fatal(err)
				}
				if err := rdb.HSet(ctx, rkey, "x", "1").Err(); err != nil {
					t.Fatal(err)
				}
				res, err := r.Allow(ctx, "acme", "mallory")
				if err != nil || !res.Allowed || res.Degraded {
					t.Fatalf("round %d: the decision after a hash at the %s level: %+v, %v; want admitted by Redis", round, name, res, err)
				}
				if typ := rdb.Type(ctx, rkey).Val(); typ != "string" {
					t.Fatalf("round %d: the %s level's key is a %s after the decision; want the level's bucket", round, name, typ)
				}
			}
			var said []string
			for _, l := range logs.take() {
				if strings.Contains(l, "path level's key held a value of another type") {
					said = append(said, l)
				}
			}
			if len(said) != 1 || !strings.Contains(said[0], "level="+name) {
				t.Errorf("log lines about the foreign value: %q; want one (once per key) naming level=%s", said, name)
			}
		})
	}
	// The batch form: the path with the hash is decided beside another.
	lim := newRedisLimiter(t, addr, WithPrefix(uniquePrefix()))
	r, err := lim.PreparePath("foreign", Level{Name: "org", Limits: []Limit{PerHour(100)}}, Level{Name: "user", Limits: []Limit{PerHour(5)}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMicro()
	mk := func(path ...string) *batch.Member[*redisstore.PathQuery, redisstore.PathAnswer] {
		c := &redisstore.PathQuery{Args: []any{len(path)}, Plans: r.views[:len(path)]}
		for lv, p := range c.Plans {
			c.RKeys = append(c.RKeys, redisstore.RedisKeyFrom(redisOf(lim).Prefix(), p.FP, path[0], pathKeyOf(path, lv), nil))
			cl := redisstore.Query{Plan: p, Cost: 1, Now: now}
			c.Args = cl.AppendGroup(c.Args)
		}
		return &batch.Member[*redisstore.PathQuery, redisstore.PathAnswer]{Req: c}
	}
	bad, good := mk("acme", "mallory"), mk("acme", "alice")
	if err := rdb.HSet(ctx, bad.Req.RKeys[1], "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, _, paths := redisstore.New(rdb, redisstore.Config{}, redisstore.Up{}).Senders(false, nil)
	paths(ctx, []*batch.Member[*redisstore.PathQuery, redisstore.PathAnswer]{bad, good})
	if bad.Err != nil || !bad.Res.D.Allowed || bad.Res.Foreign != 2 {
		t.Fatalf("the path with a hash at its user level, in a batch: %+v, %v; want admitted, the user level reported", bad.Res, bad.Err)
	}
	if good.Err != nil || !good.Res.D.Allowed || good.Res.Foreign != 0 {
		t.Fatalf("the other path: %+v, %v; want admitted, nothing reported", good.Res, good.Err)
	}
}

// TestPathPoisonedLevel: a level whose stored value no script writes (a
// lock fifty years ahead without an expiry, or a 10 MB value) is read as a
// full bucket and overwritten by the path's next charge, never locking the
// path for good; levels of one limit and of two are read apart.
func TestPathPoisonedLevel(t *testing.T) {
	addr := redistest.Start(t).Addr()
	ctx := context.Background()
	rdb := redistest.NewClient(t, addr)
	far := strconv.FormatInt(time.Now().Add(50*365*24*time.Hour).UnixMicro(), 10)
	for _, tc := range []struct {
		name   string
		limits []Limit
		value  string
	}{
		// One limit: 5 a minute, so an admitted token is 12 s of debt and
		// the key's expiry outlives a stalled test between the decision and
		// the PTTL below (at 5 a second it was 200 ms, and a Valkey run
		// under CI's load once found the key gone). Two limits: an hour's.
		{"one limit, a lock", []Limit{PerMinute(5)}, far + " 0 0"},
		{"two limits, a lock", []Limit{PerSecond(5), PerHour(1000)}, far + " 0 0 0 0"},
		{"one limit, 10 MB", []Limit{PerMinute(5)}, strings.Repeat("9", 10<<20)},
		{"two limits, 10 MB", []Limit{PerSecond(5), PerHour(1000)}, strings.Repeat("9", 10<<20)},
		{"one limit, an arrival", []Limit{PerMinute(5)}, "0 " + far + " 0"},
		{"two limits, an arrival", []Limit{PerSecond(5), PerHour(1000)}, "0 " + far + " 0 " + far + " 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := newRedisLimiter(t, addr, WithPrefix(uniquePrefix()), WithPenalty(time.Hour))
			r, err := lim.PreparePath("poison", Level{Name: "org", Limits: []Limit{PerHour(100)}}, Level{Name: "user", Limits: tc.limits})
			if err != nil {
				t.Fatal(err)
			}
			rkey := redisstore.RedisKeyFrom(redisOf(lim).Prefix(), r.plans[1].FP, "acme", pathKeyOf([]string{"acme", "mallory"}, 1), nil)
			if err := rdb.Set(ctx, rkey, tc.value, 0).Err(); err != nil {
				t.Fatal(err)
			}
			res, err := r.Allow(ctx, "acme", "mallory")
			if err != nil || !res.Allowed || res.Degraded {
				t.Fatalf("first decision after the poisoned value: %+v, %v; want admitted by Redis", res, err)
			}
			if ttl, err := rdb.PTTL(ctx, rkey).Result(); err != nil || ttl <= 0 {
				t.Errorf("PTTL after the decision = %v, %v; want an expiry", ttl, err)
			}
			if n, err := rdb.StrLen(ctx, rkey).Result(); err != nil || n > 100 {
				t.Errorf("the level's value after the decision is %d bytes, %v; want it overwritten", n, err)
			}
		})
	}
}
