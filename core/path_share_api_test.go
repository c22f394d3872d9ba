package core

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// TestShareErrors: a Share or class that is not valid is an error of
// PreparePath or InClass naming what is wrong.
func TestShareErrors(t *testing.T) {
	lim, err := NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	up := func(s *Share, limits ...Limit) Level {
		if limits == nil {
			limits = []Limit{PerSecond(100)}
		}
		return Level{Name: "up", Limits: limits, Share: s}
	}
	tenant := Level{Name: "tenant", Limits: []Limit{PerSecond(10)}}
	for _, tc := range []struct {
		name   string
		levels []Level
		want   string
	}{
		{"weight 0", []Level{up(&Share{Fair: true, Weights: map[string]int{"a": 0}}), tenant}, `weighs child "a" 0`},
		{"weight -3", []Level{up(&Share{Fair: true, Weights: map[string]int{"a": -3}}), tenant}, `weighs child "a" -3`},
		{"weight too big", []Level{up(&Share{Fair: true, Weights: map[string]int{"a": MaxWeight + 1}}), tenant}, "a weight is 1 to"},
		{"reserves over 1", []Level{up(&Share{Classes: []Class{{"a", 0.5}, {"b", 0.6}}}), tenant}, "reserves sum to 1.1, more than 1"},
		{"reserve negative", []Level{up(&Share{Classes: []Class{{"a", -0.1}}}), tenant}, "a reserve is from 0 to 1"},
		{"reserve NaN", []Level{up(&Share{Classes: []Class{{"a", math.NaN()}}}), tenant}, "a reserve is from 0 to 1"},
		{"class unnamed", []Level{up(&Share{Classes: []Class{{"", 0.1}}}), tenant}, "a class's name is 1 to"},
		{"class twice", []Level{up(&Share{Classes: []Class{{"a", 0.1}, {"a", 0.1}}}), tenant}, `two classes named "a"`},
		{"nothing shared", []Level{up(&Share{}), tenant}, "neither Fair nor Classes"},
		{"fair, no children", []Level{up(&Share{Fair: true})}, "no level is below it"},
		{"two limits", []Level{up(&Share{Fair: true}, PerSecond(100), PerHour(1000)), tenant}, "one continuous limit"},
		{"stepped", []Level{up(&Share{Fair: true}, PerInterval(100, time.Minute)), tenant}, "one continuous limit"},
		{"window", []Level{up(&Share{Fair: true, Window: time.Microsecond}), tenant}, "want 1ms to 1h"},
		{"two shared", []Level{up(&Share{Fair: true}), {Name: "tenant", Limits: []Limit{PerSecond(10)}, Share: &Share{Fair: true}}, {Name: "user", Limits: []Limit{PerSecond(1)}}}, "at most one level of a path is shared"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lim.PreparePath("bad", tc.levels...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PreparePath = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	r, err := lim.PreparePath("good", up(&Share{Classes: []Class{{"critical", 0.2}, {"rest", 0}}}), tenant)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.InClass("gold"); err == nil || !strings.Contains(err.Error(), `"gold"): no such class`) {
		t.Errorf("InClass of an unknown class = %v, want an error naming it", err)
	}
	plain, err := lim.PreparePath("plain", tenant)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.InClass("critical"); err == nil || !strings.Contains(err.Error(), "has no classes") {
		t.Errorf("InClass on a rule without classes = %v, want an error", err)
	}
}

// TestShareLocal: the memory store, and a limiter whose Redis is gone
// (the fallback, in its share of the parent), apply the same rules: a
// hog is refused for fair share while a small tenant is admitted, and a
// class is refused for the reserves above it.
func TestShareLocal(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	mem, err := NewMemory(WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	down, err := New(redistest.NewClient(t, "127.0.0.1:1"), WithTimeout(50*time.Millisecond), WithFallbackReplicas(1), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { down.Close() })
	for name, lim := range map[string]*Limiter{"memory": mem, "fallback": down} {
		t.Run(name, func(t *testing.T) {
			r, err := lim.PreparePath("local", upstreamLevels(nil, Class{"critical", 0.3}, Class{"sheddable", 0})...)
			if err != nil {
				t.Fatal(err)
			}
			shed, err := r.InClass("sheddable")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var res Result
			for range 200 {
				if res, err = shed.Allow(ctx, "upstream", "batch"); err != nil {
					t.Fatal(err)
				}
				if !res.Allowed {
					break
				}
			}
			if res.Degraded != (name == "fallback") {
				t.Fatalf("Degraded = %v on %s", res.Degraded, name)
			}
			if res.Allowed || res.Reason != ReasonReserve || res.Class != "sheddable" || res.Level != "upstream" {
				t.Fatalf("sheddable at the reserve: %+v, want refused for the class reserve at the upstream level", res)
			}
			crit, err := r.InClass("critical")
			if err != nil {
				t.Fatal(err)
			}
			if res, err = crit.Allow(ctx, "upstream", "checkout"); err != nil || !res.Allowed || res.Class != "critical" {
				t.Fatalf("critical beside the exhausted sheddable: %+v, %v; want admitted", res, err)
			}
		})
	}
	r, err := mem.PreparePath("fair", upstreamLevels(nil)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fair := 0
	for i := range 400 { // 4 ms apart: the hog 10 times a step, a small tenant once
		now = now.Add(4 * time.Millisecond)
		for range 10 {
			res, err := r.Allow(ctx, "upstream", "hog")
			if err != nil {
				t.Fatal(err)
			}
			if res.Reason == ReasonFairShare {
				fair++
			}
		}
		if res, err := r.Allow(ctx, "upstream", "small"); err != nil || !res.Allowed {
			t.Fatalf("step %d: the small tenant: %+v, %v; want admitted", i, res, err)
		}
	}
	if fair == 0 {
		t.Error("the hog was never refused for fair share")
	}
}

// TestShareOneCommandPerDecision: a decision on a path with a shared
// level is still one EVALSHA, and inside it only TIME, GET and SET.
func TestShareOneCommandPerDecision(t *testing.T) {
	srv := redistest.Start(t)
	lim := newRedisLimiter(t, srv.Addr())
	r, err := lim.PreparePath("one", upstreamLevels(nil)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.Allow(ctx, "upstream", "warm"); err != nil {
		t.Fatal(err)
	}
	redisOf(lim).WaitBackground()
	admin := redistest.NewClient(t, srv.Addr())
	before, err := redistest.CommandCalls(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range n {
		if _, err := r.Allow(ctx, "upstream", fmt.Sprintf("t%d", i%7)); err != nil {
			t.Fatal(err)
		}
	}
	after, err := redistest.CommandCalls(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	for cmd, c := range after {
		d := c - before[cmd]
		switch {
		case d == 0 || cmd == "info":
		case cmd == "evalsha" && d != n:
			t.Errorf("evalsha calls = %d, want %d", d, n)
		case cmd == "evalsha", cmd == "time", cmd == "get", cmd == "set":
		default:
			t.Errorf("unexpected command %s (%d calls)", cmd, d)
		}
	}
	if after["evalsha"]-before["evalsha"] != n {
		t.Errorf("evalsha calls = %d, want %d", after["evalsha"]-before["evalsha"], n)
	}
}

// TestShareForeignRecord: a share record of another type (a hash another
// program wrote) or of no shape a script writes (10 MB) is read as empty
// and overwritten: the decision is Redis's, never the fallback's.
func TestShareForeignRecord(t *testing.T) {
	addr := redistest.Start(t).Addr()
	ctx := context.Background()
	rdb := redistest.NewClient(t, addr)
	lim := newRedisLimiter(t, addr, WithPrefix(uniquePrefix()))
	r, err := lim.PreparePath("foreign", upstreamLevels(nil)...)
	if err != nil {
		t.Fatal(err)
	}
	prefix := redisOf(lim).Prefix()
	var rkeys []string
	for lv, p := range r.plans {
		rkeys = append(rkeys, redisstore.RedisKeyFrom(prefix, p.FP, "upstream", pathKeyOf([]string{"upstream", "acme"}, lv), nil))
	}
	parent, child := redisstore.ShareKeys(rkeys, 0)
	if err := rdb.HSet(ctx, parent, "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, child, strings.Repeat("9", 10<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := r.Allow(ctx, "upstream", "acme")
	if err != nil || !res.Allowed || res.Degraded {
		t.Fatalf("the decision over foreign records: %+v, %v; want admitted by Redis", res, err)
	}
	for _, k := range []string{parent, child} {
		if v, err := rdb.Get(ctx, k).Result(); err != nil || len(v) > 100 {
			t.Errorf("%s after the decision: %d bytes, %v; want the script's record", k, len(v), err)
		}
	}
}
