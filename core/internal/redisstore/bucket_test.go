package redisstore

import (
	"errors"
	"math"
	"testing"

	"github.com/sluicehq/sluice/core/internal/model"
)

// TestParseDebt decodes the lone form's two integers for a key under one
// continuous limit: 10 per second, burst 5 (one microsecond is 1 tick, an
// event 100,000), so a full bucket has a capacity of 500,000 ticks. The
// decisions come from the debt and the call's numbers; a pair the numbers
// contradict does not decode, and the failure marker is ErrKeyFailed.
func TestParseDebt(t *testing.T) {
	p := &plan{Ticks: []model.Tick{{R: 1, P: 100_000, B: 5}}}
	bad := errors.New("bad reply")
	for _, tc := range []struct {
		name          string
		flags, debt   int64
		cost, maxWait int64
		want          decision
		err           error
	}{
		{"full, admitted", 1, 0, 1, 0, decision{Allowed: true, Remaining: 4, Reset: 100_000}, nil},
		{"peek of a full bucket", 1, 0, 0, 0, decision{Allowed: true, Remaining: 5}, nil},
		{"last token", 1, 400_000, 1, 0, decision{Allowed: true, Reset: 500_000, Next: 100_000}, nil},
		{"a reservation that waits", 1, 450_000, 1, 60_000, decision{Allowed: true, Wait: 50_000, Reset: 550_000, Next: 150_000}, nil},
		{"denied", 0, 450_000, 1, 0, decision{Retry: 50_000, Reset: 450_000, Next: 50_000}, nil},
		{"denied, cost 3", 0, 300_000, 3, 0, decision{Retry: 100_000, Remaining: 2, Reset: 300_000}, nil},
		{"locked, the lock longer", 2 + 4*700_000, 450_000, 1, 0, decision{Locked: true, Retry: 700_000, Reset: 450_000, Next: 700_000}, nil},
		{"locked, the wait longer", 2 + 4*10, 450_000, 1, 0, decision{Locked: true, Retry: 50_000, Reset: 450_000, Next: 50_000}, nil},
		{"locked with room", 2 + 4*10, 0, 1, 0, decision{Locked: true, Retry: 10, Next: 10}, nil},
		{"failed", -1, 0, 1, 0, decision{}, ErrKeyFailed},
		{"admitted beyond its wait", 1, 450_000, 1, 0, decision{}, bad},
		{"denied within its wait", 0, 0, 1, 0, decision{}, bad},
		{"negative debt", 1, -1, 1, 0, decision{}, bad},
		{"a lock of no time", 2, 0, 1, 0, decision{}, bad},
		{"admitted and locked", 3, 0, 1, 0, decision{}, bad},
		{"flags 4", 4, 0, 1, 0, decision{}, bad},
		{"failed with a debt", -1, 5, 1, 0, decision{}, bad},
		{"the largest debt a script writes", 0, model.MaxExact, 1, 0, decision{Retry: model.MaxExact - 400_000, Reset: model.MaxExact, Next: model.MaxExact - 400_000}, nil},
		{"a debt beyond any a script writes", 0, model.MaxExact + 1, 1, 0, decision{}, bad},
		{"a debt that overflowed", 0, math.MinInt64, 1, 0, decision{}, bad},
		{"the longest lock a Duration holds", 2 + 4*int64(maxMicros), 0, 1, 0, decision{Locked: true, Retry: int64(maxMicros), Next: int64(maxMicros)}, nil},
		{"a lock longer than a Duration holds", 2 + 4*(int64(maxMicros)+1), 0, 1, 0, decision{}, bad},
		{"a lock that overflowed", math.MinInt64, 0, 1, 0, decision{}, bad},
	} {
		c := &Query{Plan: p, Cost: tc.cost, MaxWait: tc.maxWait}
		var got decision
		err := c.parseDebt([]int64{tc.flags, tc.debt}, &got)
		switch {
		case tc.err == bad:
			if !errors.Is(err, errBadReply) {
				t.Errorf("%s: %+v, %v; want a bad reply", tc.name, got, err)
			}
		case tc.err != nil:
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
			}
		case err != nil || got != tc.want:
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// TestDeliverForms decodes a reply of each form for a batch of two
// continuous keys, and refuses a lone form's reply to a batch that holds
// a key the lone form cannot carry.
func TestDeliverForms(t *testing.T) {
	one := &plan{Ticks: []model.Tick{{R: 1, P: 100_000, B: 5}}}
	two := &plan{Ticks: []model.Tick{{R: 1, P: 100_000, B: 5}, {R: 1, P: 1_000_000, B: 50}}}
	calls := []*Query{{Plan: one, Cost: 1}, {Plan: one, Cost: 1}}
	lone := []int64{1, 0, 0, 450_000, 42}
	ds, errs := DecodeBatch(calls, lone)
	if errs[0] != nil || errs[1] != nil || !ds[0].Allowed || ds[1].Allowed || ds[1].Retry != 50_000 || ds[0].At != 42 || ds[1].At != 42 {
		t.Errorf("lone form: %+v, %v", ds, errs)
	}
	batchForm := []int64{1, 0, 0, 0, 0, 0, 450_000, 0, 0, 0, 42}
	ds, errs = DecodeBatch(calls, batchForm)
	if errs[0] != nil || errs[1] != nil || !ds[0].Allowed || ds[1].Allowed || ds[1].Retry != 50_000 {
		t.Errorf("batch form: %+v, %v", ds, errs)
	}
	batchForm[3] = 7 // a continuous key's unused integers are 0
	if _, errs = DecodeBatch(calls, batchForm); !errors.Is(errs[0], errBadReply) || errs[1] != nil {
		t.Errorf("batch form with a stray integer: %v", errs)
	}
	mixed := []*Query{{Plan: one, Cost: 1}, {Plan: two, Cost: 1}}
	if _, errs = DecodeBatch(mixed, lone); !errors.Is(errs[1], errBadReply) {
		t.Errorf("lone form for a key of two limits: %v, want a bad reply", errs)
	}
	if _, errs = DecodeBatch(calls, []int64{1, 0, 42}); !errors.Is(errs[0], errBadReply) || !errors.Is(errs[1], errBadReply) {
		t.Errorf("a short reply: %v, want a bad reply for both", errs)
	}
}

// TestParseReplyDurations: a five-integer reply's durations (the wait or
// retry, the reset, the next unit's wait) decode up to the longest
// time.Duration, and not beyond it or below 0, as from a value some other
// writer left with a lock or an arrival centuries ahead.
func TestParseReplyDurations(t *testing.T) {
	p := &plan{Ticks: []model.Tick{{R: 1, P: 100_000, B: 5}, {R: 1, P: 1_000_000, B: 100}}}
	most := int64(maxMicros)
	for _, tc := range []struct {
		name string
		v    []int64
		want decision
		ok   bool
	}{
		{"locked for the longest Duration", []int64{2 | 1<<2, 0, most, most, most}, decision{Locked: true, Index: 1, Retry: most, Reset: most, Next: most}, true},
		{"admitted, waiting the longest Duration", []int64{1, 0, most, most, most}, decision{Allowed: true, Wait: most, Reset: most, Next: most}, true},
		{"a retry beyond it", []int64{2, 0, most + 1, 0, 0}, decision{}, false},
		{"a reset beyond it", []int64{0, 0, 1, most + 1, 0}, decision{}, false},
		{"a next wait beyond it", []int64{0, 0, 1, 0, most + 1}, decision{}, false},
		{"a retry that overflowed", []int64{2, 0, math.MinInt64, 0, 0}, decision{}, false},
		{"a negative reset", []int64{0, 0, 1, -1, 0}, decision{}, false},
	} {
		got, err := ParseReply(tc.v, p)
		switch {
		case !tc.ok && !errors.Is(err, errBadReply):
			t.Errorf("%s: %+v, %v; want a bad reply", tc.name, got, err)
		case tc.ok && (err != nil || got != tc.want):
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}
