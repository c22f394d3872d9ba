package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

func mustLoad(t *testing.T, zone string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestCalendarBoundaries checks the windows of calendar refills: their
// starts in local time, their lengths across DST changes and month ends,
// and that index and start agree on both sides of every boundary.
func TestCalendarBoundaries(t *testing.T) {
	ny := "America/New_York"
	tests := []struct {
		name  string
		unit  Refill
		zone  string
		at    string // an instant in the window, RFC 3339
		start string // the window's start, RFC 3339
		len   time.Duration
	}{
		{"NY spring forward: 23h day", RefillDaily, ny, "2026-03-08T12:00:00-04:00", "2026-03-08T00:00:00-05:00", 23 * time.Hour},
		{"NY before the gap", RefillDaily, ny, "2026-03-08T01:59:59-05:00", "2026-03-08T00:00:00-05:00", 23 * time.Hour},
		{"NY fall back: 25h day", RefillDaily, ny, "2026-11-01T01:30:00-05:00", "2026-11-01T00:00:00-04:00", 25 * time.Hour},
		{"NY last microsecond of the 25h day", RefillDaily, ny, "2026-11-01T23:59:59.999999-05:00", "2026-11-01T00:00:00-04:00", 25 * time.Hour},
		{"NY ordinary day", RefillDaily, ny, "2026-11-24T09:00:00-05:00", "2026-11-24T00:00:00-05:00", 24 * time.Hour},
		{"UTC midnight itself", RefillDaily, "", "2026-02-01T00:00:00Z", "2026-02-01T00:00:00Z", 24 * time.Hour},
		{"leap day 2028", RefillDaily, "UTC", "2028-02-29T13:00:00Z", "2028-02-29T00:00:00Z", 24 * time.Hour},
		{"Santiago: midnight skipped, day starts 01:00", RefillDaily, "America/Santiago", "2026-09-06T10:00:00-03:00", "2026-09-06T01:00:00-03:00", 23 * time.Hour},
		{"Santiago: midnight twice, 25h day", RefillDaily, "America/Santiago", "2026-04-04T23:30:00-04:00", "2026-04-04T00:00:00-03:00", 25 * time.Hour},
		{"January: 31 days", RefillMonthly, "UTC", "2026-01-31T23:59:59Z", "2026-01-01T00:00:00Z", 31 * 24 * time.Hour},
		{"February 2026: 28 days", RefillMonthly, "UTC", "2026-02-01T00:00:00Z", "2026-02-01T00:00:00Z", 28 * 24 * time.Hour},
		{"February 2028: 29 days", RefillMonthly, "UTC", "2028-02-29T12:00:00Z", "2028-02-01T00:00:00Z", 29 * 24 * time.Hour},
		{"NY March 2026: 31 days less an hour", RefillMonthly, ny, "2026-03-15T00:00:00-04:00", "2026-03-01T00:00:00-05:00", 31*24*time.Hour - time.Hour},
		{"NY November 2026: 30 days and an hour", RefillMonthly, ny, "2026-11-01T01:30:00-05:00", "2026-11-01T00:00:00-04:00", 30*24*time.Hour + time.Hour},
		{"NY December 2026", RefillMonthly, ny, "2026-12-31T23:00:00-05:00", "2026-12-01T00:00:00-05:00", 31 * 24 * time.Hour},
		{"week from Monday", RefillWeekly, "UTC", "2026-11-24T10:00:00Z", "2026-11-23T00:00:00Z", 7 * 24 * time.Hour},
		{"week: Sunday night is the same week", RefillWeekly, "UTC", "2026-11-29T23:59:59Z", "2026-11-23T00:00:00Z", 7 * 24 * time.Hour},
		{"NY week across fall back", RefillWeekly, ny, "2026-11-01T12:00:00-05:00", "2026-10-26T00:00:00-04:00", 7*24*time.Hour + time.Hour},
		{"week before 1970", RefillWeekly, "UTC", "1969-12-31T12:00:00Z", "1969-12-29T00:00:00Z", 7 * 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at, err := time.Parse(time.RFC3339Nano, tt.at)
			if err != nil {
				t.Fatal(err)
			}
			want, err := time.Parse(time.RFC3339, tt.start)
			if err != nil {
				t.Fatal(err)
			}
			tl, err := compileLimit(Limit{Rate: 1, Burst: 1, Refill: tt.unit, Zone: tt.zone})
			if err != nil {
				t.Fatal(err)
			}
			w := tl.Window(at.UnixMicro())
			start, end := tl.StartOf(w, 0), tl.StartOf(w, 1)
			if got := time.UnixMicro(start); !got.Equal(want) {
				t.Errorf("window(%s) starts at %s, want %s", at, got.UTC(), want.UTC())
			}
			if got := time.Duration(end-start) * time.Microsecond; got != tt.len {
				t.Errorf("window(%s) lasts %v, want %v", at, got, tt.len)
			}
			// Both sides of both boundaries, with a fresh calendar each
			// time (no cached windows).
			for _, c := range []struct {
				us  int64
				idx int64
			}{{start - 1, w.Idx - 1}, {start, w.Idx}, {end - 1, w.Idx}, {end, w.Idx + 1}} {
				fresh, _ := compileLimit(Limit{Rate: 1, Burst: 1, Refill: tt.unit, Zone: tt.zone})
				if got := fresh.Window(c.us).Idx; got != c.idx {
					t.Errorf("window(%s).idx = %d, want %d", time.UnixMicro(c.us).UTC(), got, c.idx)
				}
			}
		})
	}
}

// TestCalendarWindowsSpanYears walks three years of days, weeks and
// months in zones with DST (one changing at midnight) and checks that
// windows tile time: each starts where the last ended, at a local date
// change, and lasts 23 to 25 hours a day.
func TestCalendarWindowsSpanYears(t *testing.T) {
	for _, zone := range []string{"UTC", "America/New_York", "Europe/Berlin", "America/Santiago", "Australia/Lord_Howe", "Asia/Kolkata"} {
		loc := mustLoad(t, zone)
		for _, unit := range []Refill{RefillDaily, RefillWeekly, RefillMonthly} {
			tl, err := compileLimit(Limit{Rate: 1, Burst: 1, Refill: unit, Zone: zone})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2026, 1, 1, 12, 0, 0, 0, loc).UnixMicro()
			w := tl.Window(now)
			prevEnd := tl.StartOf(w, 0)
			for now < time.Date(2029, 1, 1, 0, 0, 0, 0, loc).UnixMicro() {
				w = tl.Window(now)
				start, end := tl.StartOf(w, 0), tl.StartOf(w, 1)
				if start != prevEnd {
					t.Fatalf("%s %s: window %d starts at %s, the last ended at %s", zone, unit, w.Idx, time.UnixMicro(start), time.UnixMicro(prevEnd))
				}
				y1, m1, d1 := time.UnixMicro(start - 1).In(loc).Date()
				if y2, m2, d2 := time.UnixMicro(start).In(loc).Date(); y1 == y2 && m1 == m2 && d1 == d2 {
					t.Fatalf("%s %s: window %d starts at %s, no date change", zone, unit, w.Idx, time.UnixMicro(start).In(loc))
				}
				if unit == RefillDaily {
					if l := time.Duration(end-start) * time.Microsecond; l < 23*time.Hour || l > 25*time.Hour {
						t.Fatalf("%s: day %s lasts %v", zone, time.UnixMicro(start).In(loc), l)
					}
				}
				prevEnd, now = end, end
			}
		}
	}
}

func TestSteppedValidate(t *testing.T) {
	tests := []struct {
		l    Limit
		want string // in the error; "" for valid
	}{
		{PerInterval(10, time.Minute), ""},
		{PerInterval(10, time.Minute).WithBurst(50), ""},
		{PerCalendarDay(1000, "America/New_York"), ""},
		{PerCalendarWeek(5, ""), ""},
		{PerCalendarMonth(5, "Europe/Paris"), ""},
		{PerInterval(10, 0), "Period must be at least 1µs"},
		{PerInterval(10, time.Nanosecond*1500), "whole number of microseconds"},
		{PerInterval(0, time.Second), "Rate must be at least 1"},
		{PerInterval(3, time.Second).WithBurst(0), "Burst must be at least 1"},
		{Limit{Rate: 1, Period: time.Second, Burst: 1, Refill: RefillInterval, Zone: "UTC"}, "Zone \"UTC\" needs a calendar Refill"},
		{Limit{Rate: 1, Period: time.Second, Burst: 1, Zone: "UTC"}, "Zone \"UTC\" needs a calendar Refill"},
		{PerCalendarDay(10, "Mars/Olympus_Mons"), `Zone "Mars/Olympus_Mons"`},
		{PerCalendarDay(10, "Local"), `Zone "Local"`},
		{PerCalendarDay(0, "UTC"), "Rate must be at least 1"},
		{PerCalendarDay(10, "UTC").WithBurst(5), "Burst must equal Rate"},
		{Limit{Rate: 10, Burst: 10, Period: time.Hour, Refill: RefillDaily}, "Period must be zero"},
		{Limit{Rate: 10, Burst: 10, Period: time.Hour, Refill: "hourly"}, `Refill "hourly"`},
	}
	for _, tt := range tests {
		err := tt.l.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%v.Validate() = %v, want nil", tt.l, err)
		case tt.want != "" && (err == nil || !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%v.Validate() = %v, want an ErrInvalidLimit saying %q", tt.l, err, tt.want)
		}
	}
}

// TestSteppedSteps runs the model through interval and calendar refills
// step by step.
func TestSteppedSteps(t *testing.T) {
	const s = 1_000_000
	// runSteps' t0 is a multiple of 2 s: windows of 2 s start at t0.
	t.Run("interval", func(t *testing.T) {
		runSteps(t, []Limit{PerInterval(2, 2*time.Second).WithBurst(3)}, []step{
			{0, 3, 0, 0, decision{Allowed: true, Remaining: 0, Reset: 4 * s}},
			{s, 1, 0, 0, decision{Remaining: 0, Retry: s, Reset: 3 * s}},
			// A reservation may wait for the next window only.
			{s, 2, 2 * s, 0, decision{Allowed: true, Remaining: 0, Wait: s, Reset: 5 * s}},
			{s, 1, 5 * s, 0, decision{Remaining: 0, Retry: 3 * s, Reset: 5 * s}},
			// Offsets are from t0. At 2 s, one window has returned 2.
			{2 * s, 1, 0, 0, decision{Remaining: 0, Retry: 2 * s, Reset: 4 * s}},
			{3 * s, 1, 0, 0, decision{Remaining: 0, Retry: s, Reset: 3 * s}},
			{4 * s, 1, 0, 0, decision{Allowed: true, Remaining: 1, Reset: 2 * s}},
			{4*s + 1, 2, 0, 0, decision{Remaining: 1, Retry: 2*s - 1, Reset: 2*s - 1}},
			// Long idle: full, never beyond Burst.
			{100 * s, 3, 0, 0, decision{Allowed: true, Remaining: 0, Reset: 4 * s}},
		})
	})
	t.Run("interval beside continuous", func(t *testing.T) {
		runSteps(t, []Limit{PerSecond(10), PerInterval(1, 2*time.Second).WithBurst(2)}, []step{
			{0, 1, 0, 0, decision{Allowed: true, Remaining: 1, Index: 1, Reset: 2 * s}},
			{0, 1, 0, 0, decision{Allowed: true, Remaining: 0, Index: 1, Reset: 4 * s}},
			{0, 1, 0, 0, decision{Remaining: 0, Index: 1, Retry: 2 * s, Reset: 4 * s}},
			{0, 1, 0, 1_500_000, decision{Locked: true, Remaining: 0, Index: 1, Retry: 2 * s, Reset: 4 * s}},
			{2 * s, 1, 0, 0, decision{Allowed: true, Remaining: 0, Index: 1, Reset: 4 * s}},
		})
	})
	t.Run("calendar day in New York across spring forward", func(t *testing.T) {
		// runSteps starts at t0 = 2023-11-14T22:13:20Z; its offsets here
		// are relative to that.
		p := mustPlan(t, PerCalendarDay(2, "America/New_York"))
		ny := mustLoad(t, "America/New_York")
		at := func(s string) int64 {
			tm, err := time.ParseInLocation("2006-01-02 15:04", s, ny)
			if err != nil {
				t.Fatal(err)
			}
			return tm.UnixMicro()
		}
		var b bucket
		type st struct {
			at   string
			cost int64
			want decision
		}
		h := int64(3600 * s)
		for i, x := range []st{
			{"2026-03-07 23:00", 2, decision{Allowed: true, Remaining: 0, Reset: h}},
			{"2026-03-07 23:30", 1, decision{Remaining: 0, Retry: h / 2, Reset: h / 2}},
			// 2026-03-08 lasts 23 hours: midnight to midnight.
			{"2026-03-08 00:00", 1, decision{Allowed: true, Remaining: 1, Reset: 23 * h}},
			{"2026-03-08 03:00", 1, decision{Allowed: true, Remaining: 0, Reset: 21 * h}},
			{"2026-03-08 23:59", 1, decision{Remaining: 0, Retry: h / 60, Reset: h / 60}},
			{"2026-03-09 00:00", 2, decision{Allowed: true, Remaining: 0, Reset: 24 * h}},
		} {
			got, _ := stepBucket(&b, at(x.at), p.Ticks, x.cost, 0, 0)
			got.Next = 0
			if got != x.want {
				t.Fatalf("step %d at %s: %+v, want %+v", i, x.at, got, x.want)
			}
		}
	})
}

// steppedPlans mix stepped refills with continuous ones.
var steppedPlans = [][]Limit{
	{PerInterval(3, 2*time.Second).WithBurst(5)},
	{PerCalendarDay(8, "America/New_York")},
	{PerSecond(10).WithBurst(3), PerCalendarDay(40, "America/New_York")},
	{PerCalendarMonth(300, "UTC"), PerInterval(2, time.Minute).WithBurst(4)},
	{PerCalendarWeek(50, "Europe/Berlin"), PerHour(100)},
	{PerCalendarMonth(3, "America/New_York"), PerCalendarDay(2, "America/New_York")},
	{PerSecond(5)},
}

// steppedBases are instants the differential tests start from: before
// the DST changes of 2026 in New York, and before the ends of January
// and February.
var steppedBases = []string{
	"2026-03-07T20:00:00-05:00",
	"2026-10-31T20:00:00-04:00",
	"2026-01-30T20:00:00Z",
	"2026-02-27T20:00:00Z",
	"2028-02-28T12:00:00Z",
}

// TestSteppedDifferential runs random sequences on stepped plans against
// the model and a real Redis, through injectedTimeScript on a virtual
// clock which also is the limiter's (so the calendar windows passed are
// those around it), across DST changes and month ends. Decisions and
// expiries must be identical.
func TestSteppedDifferential(t *testing.T) {
	rdb := redistest.NewClient(t, redistest.Addr(t))
	run := func(ctx context.Context, c *redisstore.Query, now int64) (decision, error) {
		vals, err := injectedTimeScript.Run(ctx, rdb, []string{c.RKey}, append(c.AppendArgs(nil), now)...).Int64Slice()
		if err != nil {
			return decision{}, err
		}
		return decodeOne(c, vals)
	}
	checkTTL := func(ctx context.Context, rkey string, want time.Duration) error {
		ms, err := rdb.Get(ctx, rkey+pxSuffix).Int64()
		if err != nil {
			return err
		}
		if got := time.Duration(ms) * time.Millisecond; got != want {
			return fmt.Errorf("expiry set %v, want %v", got, want)
		}
		return nil
	}
	runSteppedDifferential(t, run, checkTTL)
}

func runSteppedDifferential(t *testing.T, run decideFunc, checkTTL func(ctx context.Context, rkey string, want time.Duration) error) {
	t.Helper()
	plans := make([]*plan, len(steppedPlans))
	for i, ls := range steppedPlans {
		plans[i] = mustPlan(t, ls...)
	}
	ctx := context.Background()
	prefix := fmt.Sprintf("sluicetest:%d:", time.Now().UnixNano())
	total, allowed, crossed := 0, 0, 0
	for seq, base := range steppedBases {
		start, err := time.Parse(time.RFC3339, base)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(uint64(seq)+1, 7))
		model := map[string]*bucket{}
		now := start.UnixMicro()
		for i, s := range genSteps(r, 1500) {
			if s.dt > 0 && r.IntN(8) == 0 {
				s.dt = r.Int64N(6 * 3600_000_000) // hours at a time, to cross days
			}
			now += s.dt
			s.plan = r.IntN(len(plans))
			p := plans[s.plan]
			if s.maxWait > 0 && r.IntN(2) == 0 {
				s.maxWait = r.Int64N(30 * 3600_000_000) // long enough for a calendar's next day
			}
			c := redisstore.Query{Key: fmt.Sprintf("k%d", s.key), Plan: &p.Plan, Cost: min(s.cost, p.minB), MaxWait: min(s.maxWait, p.maxW), Penalty: s.penalty, Now: now}
			c.RKey = redisstore.RedisKey(fmt.Sprintf("%s%d:", prefix, seq), p.FP, c.Key)
			b := model[c.RKey]
			if b == nil {
				b = &bucket{}
				model[c.RKey] = b
			}
			before := b.tats
			want, wrote := stepBucket(b, now, p.Ticks, c.Cost, c.MaxWait, c.Penalty)
			got, err := run(ctx, &c, now)
			if err != nil {
				t.Fatalf("seq %d step %d: %v", seq, i, err)
			}
			if got != want {
				t.Fatalf("seq %d step %d at %s (%+v, limits %v, stored %v): store = %+v, model = %+v",
					seq, i, time.UnixMicro(now).UTC(), s, p.limits, before, got, want)
			}
			if wrote {
				wantTTL := time.Duration(ceilDiv(b.ttl(now, p.Ticks), 1000)) * time.Millisecond
				if err := checkTTL(ctx, c.RKey, wantTTL); err != nil {
					t.Fatalf("seq %d step %d (%+v, limits %v): %v", seq, i, s, p.limits, err)
				}
			}
			if got.Allowed {
				allowed++
			}
			total++
		}
		crossed += int((now - start.UnixMicro()) / 86400_000_000)
	}
	t.Logf("%d decisions (%d admitted) over about %d days, and their expiries, identical to the model", total, allowed, crossed)
}

// TestSteppedBatchMatchesModel sends random batches mixing stepped and
// continuous plans, duplicate keys included, and compares every answer
// with the model applied in order.
func TestSteppedBatchMatchesModel(t *testing.T) {
	plans := make([]*plan, 0, len(steppedPlans)+len(diffPlans))
	for _, ls := range append(append([][]Limit(nil), steppedPlans...), diffPlans...) {
		plans = append(plans, mustPlan(t, ls...))
	}
	rdb := scriptClient(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("sluicetest:%s:%d:", t.Name(), time.Now().UnixNano())
	r := rand.New(rand.NewPCG(9, 9))
	start, _ := time.Parse(time.RFC3339, "2026-10-31T12:00:00-04:00")
	now := start.UnixMicro()
	model := map[string]*bucket{}
	decisions := 0
	for range 400 {
		now += r.Int64N(600_000_000)
		n := 1 + r.IntN(12)
		calls := make([]*redisstore.Query, n)
		for i := range calls {
			p := plans[r.IntN(len(plans))]
			c := &redisstore.Query{Key: fmt.Sprint("k", r.IntN(3)), Plan: &p.Plan, Cost: 1 + r.Int64N(min(2, p.minB)), Now: now}
			if r.IntN(8) == 0 {
				c.Penalty = 500_000
			}
			if r.IntN(6) == 0 {
				c.MaxWait = min(r.Int64N(20*3600_000_000), p.maxW)
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
				t.Fatalf("batch member %d (%s, %v): script %+v, model %+v", i, c.Key, c.Plan.Ticks, got, want)
			}
			decisions++
		}
	}
	t.Logf("%d decisions in 400 batches identical to the model", decisions)
}

// TestSteppedArgs: a stepped plan goes in the batch form, with its
// windows; a continuous one's arguments are unchanged (see also
// TestAppendArgsLoneForm).
func TestSteppedArgs(t *testing.T) {
	now := time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC).UnixMicro()
	interval := mustPlan(t, PerInterval(3, 2*time.Second).WithBurst(5))
	day := mustPlan(t, PerSecond(10), PerCalendarDay(7, "America/New_York"))
	tests := []struct {
		name string
		c    redisstore.Query
		want []any
	}{
		{"interval alone", redisstore.Query{Plan: &interval.Plan, Cost: 1, Now: now}, []any{"1", "1", "0", "0", "1", "0", "3", "5", "2000000"}},
		{"calendar beside continuous", redisstore.Query{Plan: &day.Plan, Cost: 1, Now: now}, []any{"1", "1", "0", "0", "2", "1", "100000", "10",
			"-1", "7", "7", "20519",
			"1772859600000000", // 2026-03-07 00:00 EST
			"1772946000000000", // 2026-03-08 00:00 EST
			"1773028800000000", // 2026-03-09 00:00 EDT: 23 hours later
			"1773115200000000", "1773201600000000"}},
		{"plain continuous", redisstore.Query{Plan: &mustPlan(t, PerSecond(5)).Plan, Cost: 1, Now: now}, []any{"1", "200000", "5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.AppendArgs(nil); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("appendArgs = %v, want %v", got, tt.want)
			}
		})
	}
	// Calls in other windows are other groups in a batch.
	a := &redisstore.Query{Plan: &day.Plan, Cost: 1, Now: now, RKey: "a"}
	b := &redisstore.Query{Plan: &day.Plan, Cost: 1, Now: now + 1000, RKey: "b"}
	c := &redisstore.Query{Plan: &day.Plan, Cost: 1, Now: now + 86400_000_000, RKey: "c"}
	if _, args := redisstore.ScriptArgs([]*redisstore.Query{a, b, c}); args[0] != "2" {
		t.Errorf("scriptArgs of two windows: %d groups (%v), want 2", len(args), args)
	}
}

// TestCalendarClockSkew: windows that do not hold Redis's clock fail the
// call rather than count in the wrong period.
func TestCalendarClockSkew(t *testing.T) {
	rdb := scriptClient(t)
	p := mustPlan(t, PerCalendarDay(5, "UTC"))
	now := time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC).UnixMicro()
	c := redisstore.Query{Plan: &p.Plan, Cost: 1, Now: now - 3*86400_000_000, Key: "k"}
	c.RKey = testKey(t, p, "k")
	_, err := runAt(context.Background(), rdb, []string{c.RKey}, c.AppendArgs(nil), now)
	if err == nil || !strings.Contains(err.Error(), "do not hold the server clock") {
		t.Fatalf("call with windows three days off: %v, want a clock error", err)
	}
	// In a batch, only the keys of the skewed group fail.
	other := mustPlan(t, PerSecond(5))
	o := &redisstore.Query{Plan: &other.Plan, Cost: 1, Key: "o", RKey: testKey(t, other, "o")}
	keys, args := redisstore.ScriptArgs([]*redisstore.Query{&c, o})
	vals, err := runAt(context.Background(), rdb, keys, args, now)
	if err != nil {
		t.Fatalf("a batch with one skewed group: %v", err)
	}
	ds, errs := decodeAll([]*redisstore.Query{&c, o}, vals)
	if err := errs[0]; !errors.Is(err, redisstore.ErrKeyFailed) {
		t.Errorf("the skewed key: %v, want errKeyFailed", err)
	}
	if d, err := ds[1], errs[1]; err != nil || !d.Allowed {
		t.Errorf("the other key: %+v, %v; want admitted", d, err)
	}
	// A period off either way is fine.
	for _, skew := range []int64{-86400_000_000, 86400_000_000} {
		c.Now = now + skew
		if _, err := runAt(context.Background(), rdb, []string{c.RKey}, c.AppendArgs(nil), now); err != nil {
			t.Errorf("skew %dµs: %v", skew, err)
		}
	}
}

// TestSteppedLimiter drives stepped limits through the Limiter on a real
// Redis on a virtual clock: a calendar quota beside a per-second limit,
// Wait until the next day, a penalty lock across midnight, Peek, the
// deny cache, and Reserve refused.
func TestSteppedLimiter(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	now := time.Date(2026, 11, 1, 23, 0, 0, 0, ny) // the 25-hour day's last hour
	lim := newClockLimiter(t, redistest.Addr(t), &now, WithPenalty(90*time.Minute))
	defer lim.Close()
	ctx := context.Background()
	rule, err := lim.Prepare(PerSecond(10).WithBurst(20), PerCalendarDay(3, "America/New_York"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := rule.AllowN(ctx, "t", 3)
	if err != nil || !res.Allowed || res.Remaining != 0 || res.ResetAfter != time.Hour || res.Limit != PerCalendarDay(3, "America/New_York") {
		t.Fatalf("AllowN(3) = %+v, %v; want admitted, 0 left, reset in 1h by the daily quota", res, err)
	}
	if res, err := rule.Peek(ctx, "t"); err != nil || res.Allowed || res.RetryAfter != time.Hour {
		t.Fatalf("Peek = %+v, %v; want denied until midnight", res, err)
	}
	// Denied: the penalty lock (90 minutes) outlasts midnight.
	res, err = rule.Allow(ctx, "t")
	if err != nil || res.Allowed || res.RetryAfter != 90*time.Minute {
		t.Fatalf("Allow = %+v, %v; want denied and locked for 90m", res, err)
	}
	now = now.Add(time.Hour) // midnight: a new day, still locked
	if res, err = rule.Allow(ctx, "t"); err != nil || res.Allowed || res.RetryAfter != 30*time.Minute {
		t.Fatalf("at midnight: %+v, %v; want locked for 30m more", res, err)
	}
	now = now.Add(30 * time.Minute)
	if res, err = rule.Allow(ctx, "t"); err != nil || !res.Allowed || res.Remaining != 2 {
		t.Fatalf("after the lock: %+v, %v; want admitted with the new day's quota", res, err)
	}
	// Wait: a reservation on a spent quota waits until the next midnight.
	rule2, _ := lim.Prepare(PerCalendarDay(1, "America/New_York"))
	if res, err = rule2.Allow(ctx, "w"); err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if res, err = rule2.Wait(wctx, "w", 1); err != nil || res.Allowed {
		t.Fatalf("Wait(10ms) on a spent daily quota = %+v, %v; want denied at once", res, err)
	}
}

// TestSteppedFallbackShare: the fallback's share of a stepped limit.
func TestSteppedFallbackShare(t *testing.T) {
	f := shareOf(4)
	if got, want := f(PerCalendarDay(1000, "Europe/Paris")), PerCalendarDay(250, "Europe/Paris"); got != want {
		t.Errorf("share of %v = %v, want %v", PerCalendarDay(1000, "Europe/Paris"), got, want)
	}
	if got, want := f(PerCalendarMonth(5, "")), PerCalendarMonth(2, ""); got != want {
		t.Errorf("share of 5 a month = %v, want %v", got, want)
	}
	if got, want := f(PerInterval(10, time.Minute).WithBurst(30)), PerInterval(3, time.Minute).WithBurst(8); got != want {
		t.Errorf("share of interval = %v, want %v", got, want)
	}
	p, err := newPlan([]Limit{PerSecond(10), PerCalendarDay(1000, "Europe/Paris")}, f)
	if err != nil || len(p.coarse) != 0 || p.local.limits[1] != PerCalendarDay(250, "Europe/Paris") {
		t.Fatalf("newPlan with shares: %v, %+v", err, p)
	}
}

// TestSteppedLocalCharge: the fallback kept warm from Redis's admissions
// counts a calendar quota in the same window, and forgets it at the
// boundary.
func TestSteppedLocalCharge(t *testing.T) {
	p := mustPlan(t, PerCalendarDay(4, "UTC"))
	s := newLocalStore(1000)
	now := time.Date(2026, 2, 28, 23, 0, 0, 0, time.UTC).UnixMicro()
	s.charge(p.ID, "k", now, p.Ticks, 3, true)
	if d := s.take(p.ID, "k", now, p.Ticks, 2, 0, 0); d.Allowed || d.Retry != 3600_000_000 {
		t.Fatalf("after charging 3 of 4: %+v, want denied until midnight", d)
	}
	if d := s.take(p.ID, "k", now+3600_000_000, p.Ticks, 4, 0, 0); !d.Allowed {
		t.Fatalf("on March 1: %+v, want admitted", d)
	}
}

// TestStepMixedMatchesContinuous: on continuous limits alone, stepMixed
// (which also decides them beside stepped ones) agrees with
// stepContinuous, the fast path, step by step.
func TestStepMixedMatchesContinuous(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	for _, ls := range diffPlans {
		p := mustPlan(t, ls...)
		var a, b bucket
		now := int64(1_800_000_000_000_000)
		for i, s := range genSteps(r, 3000) {
			now += s.dt
			cost := min(s.cost, p.minB)
			da, wa := stepContinuous(&a, now, p.Ticks, cost, s.maxWait, s.penalty)
			db, wb := stepMixed(&b, now, p.Ticks, cost, s.maxWait, s.penalty)
			if da != db || wa != wb || fmt.Sprint(a.tats, a.lock) != fmt.Sprint(b.tats, b.lock) {
				t.Fatalf("%v step %d: continuous %+v %v %v, mixed %+v %v %v", ls, i, da, wa, a, db, wb, b)
			}
		}
	}
}

// TestSteppedDenyCache: the deny cache answers for a spent calendar
// quota with the quota's own limit and reset, until midnight.
func TestSteppedDenyCache(t *testing.T) {
	now := time.Date(2026, 2, 28, 22, 0, 0, 0, time.UTC)
	rec := newRecorder()
	lim := newClockLimiter(t, redistest.Addr(t), &now, WithObserver(rec))
	defer lim.Close()
	ctx := context.Background()
	day := PerCalendarDay(2, "UTC")
	rule, err := lim.Prepare(PerSecond(5), day)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := rule.AllowN(ctx, "k", 2); err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	for i := range 3 { // from Redis, then from the deny cache
		now = now.Add(100 * time.Millisecond)
		res, err := rule.Allow(ctx, "k")
		want := 2*time.Hour - time.Duration(i+1)*100*time.Millisecond
		if err != nil || res.Allowed || res.Limit != day || res.RetryAfter != want || res.ResetAfter != want {
			t.Fatalf("denial %d: %+v, %v; want the daily quota's, retry and reset in %v", i, res, err, want)
		}
	}
	if rec.bySource[SourceDenyCache] != 2 {
		t.Errorf("%d answers from the deny cache, want 2 (%v)", rec.bySource[SourceDenyCache], rec.bySource)
	}
	now = now.Add(2 * time.Hour) // March 1
	if res, err := rule.Allow(ctx, "k"); err != nil || !res.Allowed || res.Remaining != 1 {
		t.Fatalf("on March 1: %+v, %v; want admitted, 1 left", res, err)
	}
}
