package core

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/internal/model"
)

// TestSpaceSavingBounds drives weighted Zipf streams through sketches of
// several sizes and checks the bounds the sketch states against exact
// counts: a key holding a counter has count-err <= true <= count, a key
// holding none has true <= min, min <= total/m, and the table finds every
// counter (its deletions keep probing chains whole).
func TestSpaceSavingBounds(t *testing.T) {
	for _, tc := range []struct {
		m, keys, events int
		s               float64
		maxW            int64
	}{
		{m: 4, keys: 50, events: 5000, s: 1.1, maxW: 1},
		{m: 16, keys: 1000, events: 20000, s: 1.1, maxW: 5},
		{m: 64, keys: 100_000, events: 50000, s: 1.1, maxW: 3},
		{m: 64, keys: 40, events: 3000, s: 1.5, maxW: 1}, // never full: exact
		{m: 128, keys: 10_000, events: 50000, s: 2.0, maxW: 10},
	} {
		t.Run(strconv.Itoa(tc.m)+"/"+strconv.Itoa(tc.keys), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.m), uint64(tc.keys)))
			z := rand.NewZipf(rng, tc.s, 1, uint64(tc.keys-1))
			s := newSpaceSaving(tc.m, true)
			truth := map[uint64]int64{}
			var total int64
			for range tc.events {
				key := "k" + strconv.FormatUint(z.Uint64(), 10)
				w := 1 + rng.Int64N(tc.maxW)
				h := model.KeyHash(key)
				truth[h] += w
				total += w
				s.add(h, w, key)
			}
			checkSketch(t, s, truth, total, tc.m)
			if tc.keys <= tc.m && s.min() != 0 {
				t.Errorf("min %d with %d keys in %d counters: want 0 (exact)", s.min(), tc.keys, tc.m)
			}
		})
	}
}

// checkSketch checks s's stated bounds against truth.
func checkSketch(t *testing.T, s *spaceSaving, truth map[uint64]int64, total int64, m int) {
	t.Helper()
	if s.total != total {
		t.Fatalf("total %d, want %d", s.total, total)
	}
	lo := s.min()
	if lo > total/int64(m) {
		t.Errorf("min %d > total/m = %d", lo, total/int64(m))
	}
	held := map[uint64]bool{}
	for c := range s.n {
		h := s.hash[c]
		held[h] = true
		if i, ok := s.find(h); !ok || s.table[i]-1 != int32(c) {
			t.Fatalf("counter %d (hash %x) not found in the table", c, h)
		}
		if tr := truth[h]; s.count[c]-s.err[c] > tr || tr > s.count[c] || s.err[c] > lo {
			t.Errorf("hash %x: count %d err %d, true %d, min %d", h, s.count[c], s.err[c], tr, lo)
		}
		if p := s.pos[c]; s.heap[p] != int32(c) {
			t.Fatalf("heap position of counter %d is wrong", c)
		}
	}
	for h, tr := range truth {
		if !held[h] && tr > lo {
			t.Errorf("hash %x has true count %d > min %d but holds no counter", h, tr, lo)
		}
	}
	for i := 1; i < s.n; i++ {
		if s.count[s.heap[(i-1)/2]] > s.count[s.heap[i]] {
			t.Fatalf("heap order broken at %d", i)
		}
	}
}

// TestSpaceSavingNames: with names kept, each counter names its key, cut
// to maxTopName bytes.
func TestSpaceSavingNames(t *testing.T) {
	s := newSpaceSaving(2, true)
	long := strings.Repeat("x", 100)
	for _, k := range []string{"a", "b", "a", long} {
		s.add(model.KeyHash(k), 1, k)
	}
	got := map[string]int64{}
	for c := range s.n {
		got[s.name(c)] = s.count[c]
	}
	if got["a"] != 2 || got[long[:maxTopName]] != 2 || len(got) != 2 {
		t.Errorf("names and counts %v: want a=2 and the long key's first 64 bytes = 2 (b's 1 inherited)", got)
	}
	if s := newSpaceSaving(2, false); s.name(0) != "" {
		t.Error("a sketch without names named a counter")
	}
}

// TestTopTalkersOptions: out-of-range settings are refused by name.
func TestTopTalkersOptions(t *testing.T) {
	for _, tc := range []struct {
		tt   TopTalkers
		want string
	}{
		{TopTalkers{K: 101}, "K is 101"},
		{TopTalkers{K: -1}, "K is -1"},
		{TopTalkers{K: 10, Counters: 5}, "Counters is 5"},
		{TopTalkers{Counters: 5000}, "Counters is 5000"},
		{TopTalkers{Window: time.Second}, "Window is 1s"},
		{TopTalkers{Window: 90500 * time.Millisecond}, "Window is 1m30.5s"},
		{TopTalkers{Flush: 10 * time.Millisecond}, "Flush is 10ms"},
		{TopTalkers{Window: 10 * time.Second, Flush: 20 * time.Second}, "Flush is 20s"},
	} {
		_, err := NewMemory(WithTopTalkers(tc.tt))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one saying %q", tc.tt, err, tc.want)
		}
	}
	lim, err := NewMemory(WithTopTalkers(TopTalkers{}))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	if names, k := lim.TopLimits(); names != nil || k != 10 {
		t.Errorf("TopLimits of a fresh limiter: %v, %d; want none and the default K 10", names, k)
	}
	ctx := context.Background()
	if _, err := lim.Top(ctx, "", 5); err == nil {
		t.Error("Top of an empty limit name: no error")
	}
	if _, err := lim.Top(ctx, "api", 0); err == nil {
		t.Error("Top with k 0: no error")
	}
}

// TestTopMemory: a NewMemory limiter counts admitted cost and denials per
// named limit, exactly while keys fit the counters; an admission counts
// on every named limit of its rule, a denial on the limit that denied;
// unnamed limits are not counted; a flush moves the counts to the window
// without changing what Top reads; Close stops the flush goroutine.
func TestTopMemory(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	lim, err := NewMemory(WithTopTalkers(TopTalkers{K: 3, Names: true}), WithClock(func() time.Time { return clock }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	burst := Limit{Name: "burst", Rate: 1, Period: time.Hour, Burst: 5}
	hourly := Limit{Name: "hourly", Rate: 100, Period: time.Hour, Burst: 100}
	rule, err := lim.Prepare(burst, hourly)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range map[string]int{"alice": 8, "bob": 3, "carol": 1} {
		for range n {
			if _, err := rule.AllowN(ctx, i, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := lim.Allow(ctx, "dave", PerSecond(10)); err != nil { // unnamed: not counted
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		b, err := lim.Top(ctx, "burst", 3)
		if err != nil {
			t.Fatal(err)
		}
		h, err := lim.Top(ctx, "hourly", 3)
		if err != nil {
			t.Fatal(err)
		}
		got := talkersText(b) + " | " + talkersText(h)
		want := "adm alice=5/3 bob=3/0 carol=1/0 den alice=5/3 total 9/3 err 0/0 | adm alice=5/0 bob=3/0 carol=1/0 den total 9/0 err 0/0"
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s", when, got, want)
		}
	}
	check("before a flush")
	if err := lim.plans.top.flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a flush")
	if names, k := lim.TopLimits(); strings.Join(names, ",") != "burst,hourly" || k != 3 {
		t.Errorf("TopLimits: %v, %d", names, k)
	}
	clock = clock.Add(2 * time.Minute) // both windows read are now empty
	if b, _ := lim.Top(ctx, "burst", 3); b.Admitted != 0 || len(b.ByAdmitted) != 0 {
		t.Errorf("two windows later: %s", talkersText(b))
	}
	lim.Close()
	waitGone(t, "(*topTalkers).run")
}

// talkersText writes a Talkers compactly for comparisons: each key's
// admitted/denied counts, by admitted cost then by denials, the totals
// and the error bounds.
func talkersText(tk Talkers) string {
	var b strings.Builder
	b.WriteString("adm")
	for _, t := range tk.ByAdmitted {
		b.WriteString(" " + t.Label() + "=" + strconv.FormatInt(t.Admitted, 10) + "/" + strconv.FormatInt(t.Denied, 10))
	}
	b.WriteString(" den")
	for _, t := range tk.ByDenied {
		b.WriteString(" " + t.Label() + "=" + strconv.FormatInt(t.Admitted, 10) + "/" + strconv.FormatInt(t.Denied, 10))
	}
	b.WriteString(" total " + strconv.FormatInt(tk.Admitted, 10) + "/" + strconv.FormatInt(tk.Denied, 10))
	b.WriteString(" err " + strconv.FormatInt(tk.AdmittedError, 10) + "/" + strconv.FormatInt(tk.DeniedError, 10))
	return b.String()
}

// waitGone waits until no goroutine runs fn (a function name as stacks
// show it), failing after a generous hang guard.
func waitGone(t *testing.T, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.Stack(buf, true)
		if !strings.Contains(string(buf[:n]), fn) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a goroutine still runs %s after Close", fn)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
