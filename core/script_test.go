package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// scriptClient returns a client for the real Redis the script tests run
// on (redistest.Addr).
func scriptClient(t *testing.T) *redis.Client {
	t.Helper()
	return redistest.NewClient(t, redistest.Addr(t))
}

// testKey returns a stored name private to the test.
func testKey(t *testing.T, p *plan, key string) string {
	return redisstore.RedisKey(fmt.Sprintf("sluicetest:%s:%d:", t.Name(), time.Now().UnixNano()), p.FP, key)
}

func mustPlan(t *testing.T, limits ...Limit) *plan {
	t.Helper()
	p, err := newPlan(limits, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAppendArgsLoneForm checks the lone form's layout (see the layout
// table at the top of core/internal/redisstore/bucket.lua).
func TestAppendArgsLoneForm(t *testing.T) {
	one := mustPlan(t, PerSecond(5))
	two := mustPlan(t, PerSecond(10).WithBurst(3), PerMinute(40))
	tests := []struct {
		name string
		c    redisstore.Query
		want []any
	}{
		{"plain", redisstore.Query{Plan: &one.Plan, Cost: 1}, []any{"1", "200000", "5"}},
		{"cost", redisstore.Query{Plan: &one.Plan, Cost: 3}, []any{"1", "200000", "5", "3"}},
		{"wait", redisstore.Query{Plan: &one.Plan, Cost: 1, MaxWait: 700}, []any{"1", "200000", "5", "1", "700"}},
		{"penalty", redisstore.Query{Plan: &one.Plan, Cost: 1, Penalty: 9000}, []any{"1", "200000", "5", "1", "0", "9000"}},
		{"several limits: one group", redisstore.Query{Plan: &two.Plan, Cost: 2},
			[]any{"1", "2", "0", "0", "2", "1", "100000", "3", "1", "1500000", "40"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.AppendArgs(nil); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("appendArgs = %v, want %v", got, tt.want)
			}
		})
	}
}

// hashMember is one call of a batch that sendWithHashes sends.
type hashMember struct {
	p     *plan
	cost  int64
	wrong bool // the key holds a hash
}

// sendWithHashes sends members in one script call, as the store would
// (ScriptArgs), on keys k0, k1, ... of the test, those marked wrong holding
// a hash first, and returns the calls and the reply, checked for its size.
func sendWithHashes(t *testing.T, rdb *redis.Client, members []hashMember) ([]*redisstore.Query, []int64) {
	t.Helper()
	ctx := context.Background()
	calls := make([]*redisstore.Query, len(members))
	for i, m := range members {
		calls[i] = &redisstore.Query{Key: fmt.Sprint("k", i), Plan: &m.p.Plan, Cost: m.cost}
		calls[i].SetRKey(testKey(t, m.p, calls[i].Key))
		if m.wrong {
			if err := rdb.HSet(ctx, calls[i].RKey, "f", "v").Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	keys, args := redisstore.ScriptArgs(calls)
	vals, err := redisstore.BucketScript.Run(ctx, rdb, keys, args...).Int64Slice()
	if err != nil {
		t.Fatalf("the call failed: %v", err)
	}
	if n := len(calls); len(vals) != redisstore.DebtWidth*n+redisstore.ReplyTime && len(vals) != redisstore.ReplyWidth*n+redisstore.ReplyTime {
		t.Fatalf("%d integers for %d keys", len(vals), n)
	}
	return calls, vals
}

// TestScriptKeyFailureIsolated sends batches in which some keys hold a hash
// (another program's value): those keys, and only those, get errKeyFailed;
// the others are decided, and the hashes are left alone.
func TestScriptKeyFailureIsolated(t *testing.T) {
	a := mustPlan(t, PerSecond(5))
	b := mustPlan(t, PerSecond(10).WithBurst(3), PerMinute(40))
	tests := []struct {
		name    string
		members []hashMember
	}{
		{"middle of one group", []hashMember{{a, 1, false}, {a, 1, true}, {a, 1, false}}},
		{"middle of several groups", []hashMember{{a, 1, false}, {b, 1, true}, {a, 2, false}}},
		{"first and last", []hashMember{{a, 1, true}, {a, 1, false}, {a, 1, false}, {a, 1, true}}},
		{"several limits", []hashMember{{b, 2, false}, {b, 1, true}, {b, 1, false}}},
	}
	rdb := scriptClient(t)
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls, vals := sendWithHashes(t, rdb, tt.members)
			ds, errs := decodeAll(calls, vals)
			for i, c := range calls {
				d, err := ds[i], errs[i]
				typ, _ := rdb.Type(ctx, c.RKey).Result()
				if tt.members[i].wrong {
					if !errors.Is(err, redisstore.ErrKeyFailed) || typ != "hash" {
						t.Fatalf("key %d (a hash): %+v, %v; the key is a %s", i, d, err, typ)
					}
					continue
				}
				// A fresh bucket decides the same at any instant.
				want, _ := stepBucket(&bucket{}, 0, c.Plan.Ticks, c.Cost, 0, 0)
				if err != nil || d != want || typ != "string" {
					t.Fatalf("key %d: %+v, %v, want %+v; the key is a %s", i, d, err, want, typ)
				}
			}
		})
	}
}

// TestScriptReplySizes sends batches around the size at which the script
// stops making its reply in one step and fills it in a loop (2,000
// integers: in the batch form 399 keys and fewer in one step, in the lone
// form with several keys 999 and fewer), with a key that holds a hash
// near each end: every other key is decided, and the failing ones, only
// they, say so.
func TestScriptReplySizes(t *testing.T) {
	a := mustPlan(t, PerSecond(5))
	b := mustPlan(t, PerSecond(10).WithBurst(3), PerMinute(40))
	rdb := scriptClient(t)
	for _, n := range []int{2, 399, 400, 450, 999, 1000} {
		for _, p := range []*plan{a, b} {
			t.Run(fmt.Sprintf("%d keys, %d limits", n, len(p.Ticks)), func(t *testing.T) {
				wrong := map[int]bool{1: true}
				if n > 3 {
					wrong[n-2] = true
				}
				members := make([]hashMember, n)
				for i := range members {
					members[i] = hashMember{p, 1, wrong[i]}
				}
				calls, vals := sendWithHashes(t, rdb, members)
				want, _ := stepBucket(&bucket{}, 0, p.Ticks, 1, 0, 0)
				ds, errs := decodeAll(calls, vals)
				for i := range calls {
					d, err := ds[i], errs[i]
					if wrong[i] != errors.Is(err, redisstore.ErrKeyFailed) || (!wrong[i] && (err != nil || d != want)) {
						t.Fatalf("key %d (a hash: %v): %+v, %v, want %+v", i, wrong[i], d, err, want)
					}
				}
				if at := vals[len(vals)-1]; at < 1_700_000_000_000_000 {
					t.Fatalf("the call's instant %d is not Redis's clock", at)
				}
			})
		}
	}
}

// TestScriptEveryKeyFails checks that a call whose every key fails fails
// with Redis's own error: a lone call, and a batch.
func TestScriptEveryKeyFails(t *testing.T) {
	a := mustPlan(t, PerSecond(5))
	b := mustPlan(t, PerSecond(10).WithBurst(3), PerMinute(40))
	rdb := scriptClient(t)
	ctx := context.Background()
	var calls []*redisstore.Query
	for i, p := range []*plan{a, a, b} {
		c := &redisstore.Query{Key: fmt.Sprint("k", i), Plan: &p.Plan, Cost: 1}
		c.RKey = testKey(t, p, c.Key)
		if err := rdb.HSet(ctx, c.RKey, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	for _, c := range calls {
		err := redisstore.BucketScript.Run(ctx, rdb, []string{c.RKey}, c.AppendArgs(nil)...).Err()
		if !isCode(err, "WRONGTYPE") {
			t.Fatalf("lone call on a hash (%d limits): %v, want WRONGTYPE", len(c.Plan.Ticks), err)
		}
	}
	for _, batch := range [][]*redisstore.Query{calls[:1], calls[:2], calls} {
		keys, args := redisstore.ScriptArgs(batch)
		err := redisstore.BucketScript.Run(ctx, rdb, keys, args...).Err()
		if !isCode(err, "WRONGTYPE") {
			t.Fatalf("batch of %d hashes: %v, want WRONGTYPE", len(batch), err)
		}
	}
}

// isCode reports whether err is the Redis error code: the reply starts
// with it (clients act on codes such as READONLY).
func isCode(err error, code string) bool {
	return err != nil && strings.HasPrefix(err.Error(), code+" ")
}

// TestScriptServerErrorFailsCall runs a batch on a Redis out of memory:
// the first key is denied (no write), the second needs a write and gets
// OOM. That is the server's state, not the key's: the call fails with OOM,
// as a lone call would, rather than answering the first key.
func TestScriptServerErrorFailsCall(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redistest.NewClient(t, srv.Addr())
	ctx := context.Background()
	p := mustPlan(t, PerSecond(5))
	calls := []*redisstore.Query{{Key: "locked", Plan: &p.Plan, Cost: 1}, {Key: "fresh", Plan: &p.Plan, Cost: 1}}
	for _, c := range calls {
		c.RKey = testKey(t, p, c.Key)
	}
	lock := time.Now().Add(time.Hour).UnixMicro()
	if err := rdb.Set(ctx, calls[0].RKey, fmt.Sprintf("%d %d 0", lock, lock), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	keys, args := redisstore.ScriptArgs(calls)
	err := redisstore.BucketScript.Run(ctx, rdb, keys, args...).Err()
	if !isCode(err, "OOM") {
		t.Fatalf("batch on a Redis out of memory: %v, want OOM", err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	vals, err := redisstore.BucketScript.Run(ctx, rdb, keys, args...).Int64Slice()
	if err != nil {
		t.Fatalf("with memory again: %v", err)
	}
	if ds, errs := decodeAll(calls, vals); errs[0] != nil || errs[1] != nil || !ds[0].Locked || !ds[1].Allowed {
		t.Fatalf("with memory again: %v: %+v, %v; want the first key locked, the second admitted", vals, ds, errs)
	}
}

// decodeOne decodes the reply of a bucket.lua call that decided c alone
// as the store does, without the instant it carries (the model's
// decisions have none).
func decodeOne(c *redisstore.Query, vals []int64) (decision, error) {
	d, err := c.Decode(vals)
	d.At = 0
	return d, err
}

// decodeAll decodes the reply of a bucket.lua call that decided calls
// (redisstore.ScriptArgs) as the store's batches do, without the instant
// each decision carries: each call's decision and error.
func decodeAll(calls []*redisstore.Query, vals []int64) ([]decision, []error) {
	ds, errs := redisstore.DecodeBatch(calls, vals)
	for i := range ds {
		ds[i].At = 0
	}
	return ds, errs
}

// runAt runs the script with the clock at now (microseconds), through
// injectedTimeScript.
func runAt(ctx context.Context, rdb *redis.Client, keys []string, args []any, now int64) ([]int64, error) {
	return injectedTimeScript.Run(ctx, rdb, keys, append(args, now)...).Int64Slice()
}

// TestScriptBatchMatchesModel sends random batches, duplicate keys
// included, at one virtual instant each, and compares every answer with
// the model applied in order. Some batches share one limit and one cost,
// wait and penalty (the lone form with several keys, or for several
// limits one group), the others mix costs, waits, penalties and plans
// (the batch form's groups).
func TestScriptBatchMatchesModel(t *testing.T) {
	plans := make([]*plan, len(diffPlans))
	for i, ls := range diffPlans {
		plans[i] = mustPlan(t, ls...)
	}
	rdb := scriptClient(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("sluicetest:%s:%d:", t.Name(), time.Now().UnixNano())
	r := rand.New(rand.NewPCG(5, 5))
	now := int64(1_800_000_000_000_000)
	model := map[string]*bucket{}
	decisions := 0
	for range 300 {
		now += r.Int64N(400_000)
		n := 1 + r.IntN(20)
		shared := r.IntN(2) == 0 // one group for the whole batch
		sp := plans[r.IntN(len(plans))]
		numbers := func(c *redisstore.Query, p *plan) {
			c.Cost = 1 + r.Int64N(min(2, p.minB))
			if r.IntN(8) == 0 {
				c.Penalty = 500_000
			}
			if r.IntN(6) == 0 {
				c.MaxWait = min(r.Int64N(1_000_000), p.maxW)
			}
		}
		var same redisstore.Query // the shared batch's cost, wait and penalty
		numbers(&same, sp)
		calls := make([]*redisstore.Query, n)
		for i := range calls {
			p := sp
			if !shared {
				p = plans[r.IntN(len(plans))]
			}
			c := &redisstore.Query{Key: fmt.Sprint("k", r.IntN(4)), Plan: &p.Plan, Cost: same.Cost, MaxWait: same.MaxWait, Penalty: same.Penalty}
			if !shared {
				numbers(c, p)
			}
			c.RKey = redisstore.RedisKey(prefix, p.FP, c.Key)
			calls[i] = c
		}
		keys, args := redisstore.ScriptArgs(calls)
		vals, err := runAt(ctx, rdb, keys, args, now)
		if err != nil {
			t.Fatal(err)
		}
		gots, errs := decodeAll(calls, vals)
		for i, c := range calls {
			got, err := gots[i], errs[i]
			if err != nil {
				t.Fatal(err)
			}
			b := model[c.RKey]
			if b == nil {
				b = &bucket{}
				model[c.RKey] = b
			}
			want, _ := stepBucket(b, now, c.Plan.Ticks, c.Cost, c.MaxWait, c.Penalty)
			if got != want {
				t.Fatalf("batch member %d (%s, %v, shared %v): script %+v, model %+v", i, c.Key, c.Plan.Ticks, shared, got, want)
			}
			decisions++
		}
	}
	t.Logf("%d decisions in 300 batches identical to the model", decisions)
}

// TestScriptReadsStoredState writes buckets as the script has always
// stored them ("lock tat1 frac1 ...", decimal) and checks that lone and
// batch calls read them as the model would, and write them back in that
// same format: keys in Redis keep their state across an upgrade, in either
// direction.
func TestScriptReadsStoredState(t *testing.T) {
	const now = int64(1_800_000_000_000_000)
	one := mustPlan(t, PerSecond(5))
	frac := mustPlan(t, Limit{Rate: 7, Period: 1500 * time.Millisecond, Burst: 4})
	two := mustPlan(t, PerSecond(10).WithBurst(3), PerMinute(40))
	tests := []struct {
		name string
		p    *plan
		b    bucket
		c    redisstore.Query
	}{
		{"debt", one, bucket{tats: []tat{{now + 300_000, 0}}}, redisstore.Query{Cost: 1}},
		{"full after a while", one, bucket{tats: []tat{{now - 5_000_000, 0}}}, redisstore.Query{Cost: 1}},
		{"denied", one, bucket{tats: []tat{{now + 900_000, 0}}}, redisstore.Query{Cost: 2}},
		{"fraction", frac, bucket{tats: []tat{{now + 400_000, 5}}}, redisstore.Query{Cost: 1}},
		{"locked", one, bucket{lock: now + 2_000_000, tats: []tat{{now, 0}}}, redisstore.Query{Cost: 1}},
		{"lock ended", one, bucket{lock: now - 1, tats: []tat{{now + 100, 0}}}, redisstore.Query{Cost: 1}},
		{"penalty", one, bucket{tats: []tat{{now + 1_000_000, 0}}}, redisstore.Query{Cost: 1, Penalty: 3_000_000}},
		{"wait", frac, bucket{tats: []tat{{now + 800_000, 3}}}, redisstore.Query{Cost: 2, MaxWait: 900_000}},
		{"two limits", two, bucket{tats: []tat{{now + 50_000, 0}, {now + 7_000_000, 1}}}, redisstore.Query{Cost: 1}},
	}
	format := func(b *bucket) string {
		s := fmt.Sprint(b.lock)
		for _, x := range b.tats {
			s += fmt.Sprintf(" %d %d", x.us, x.frac)
		}
		return s
	}
	rdb := scriptClient(t)
	ctx := context.Background()
	for _, tt := range tests {
		for _, form := range []string{"lone", "batch"} {
			t.Run(tt.name+"/"+form, func(t *testing.T) {
				c := tt.c
				c.Plan, c.Key = &tt.p.Plan, "k"
				c.RKey = testKey(t, tt.p, c.Key)
				b := tt.b
				b.tats = append([]tat(nil), b.tats...)
				b.set = true
				if err := rdb.Set(ctx, c.RKey, format(&b), time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				keys, args := []string{c.RKey}, c.AppendArgs(nil)
				if form == "batch" {
					keys, args = redisstore.ScriptArgs([]*redisstore.Query{&c})
				}
				vals, err := runAt(ctx, rdb, keys, args, now)
				if err != nil {
					t.Fatal(err)
				}
				got, err := decodeOne(&c, vals)
				if err != nil {
					t.Fatal(err)
				}
				before := format(&b)
				want, wrote := stepBucket(&b, now, c.Plan.Ticks, c.Cost, c.MaxWait, c.Penalty)
				if got != want {
					t.Fatalf("from %q: script %+v, model %+v", before, got, want)
				}
				stored, err := rdb.Get(ctx, c.RKey).Result()
				if err != nil {
					t.Fatal(err)
				}
				if wrote && stored != format(&b) || !wrote && stored != before {
					t.Fatalf("from %q: stored %q, want %q (written: %v)", before, stored, format(&b), wrote)
				}
			})
		}
	}
}
