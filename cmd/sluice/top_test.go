package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// TestTop: on a real Redis, top prints what two services' replicas
// flushed of a limit: the totals, the keys most denied and those of
// largest admitted cost, hashed unless the services keep names; bad
// arguments exit 2.
func TestTop(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	search := core.Limit{Name: "search", Rate: 10, Period: time.Hour, Burst: 10}
	traffic := map[string]int{"tenant:acme": 40, "tenant:globex": 14, "tenant:initech": 6, "tenant:hooli": 2}
	for _, names := range []bool{true, false} {
		lim, err := core.New(redistest.NewClient(t, addr), core.WithPrefix("clitest:"), core.WithTimeout(10*time.Second),
			core.WithTopTalkers(core.TopTalkers{Names: names}))
		if err != nil {
			t.Fatal(err)
		}
		for key, n := range traffic {
			for range n / 2 { // each replica sends half
				if _, err := lim.Allow(t.Context(), key, search); err != nil {
					t.Fatal(err)
				}
			}
		}
		lim.Close() // flushes
	}
	code, out, errOut := sluice(t, addr, "top", "search", "3")
	t.Logf("sluice top search 3:\n%s", out)
	_, body, _ := strings.Cut(out, "\n")
	want := `
most denied:
DENIED  ADMITTED  KEY
    30        10  tenant:acme
     4        10  tenant:globex

largest admitted cost:
ADMITTED  DENIED  KEY
      10      30  tenant:acme
      10       4  tenant:globex
       6       0  tenant:initech
`
	head := "limit search since "
	if code != 0 || body != want || !strings.HasPrefix(out, head) || !strings.Contains(out, ": admitted cost 28 (each count ±0), denials 34 (±0)\n") {
		t.Errorf("sluice top = %d, stdout\n%s\nstderr %q; want a first line %q..., then\n%s", code, out, errOut, head, want)
	}
	for _, st := range []struct {
		args    []string
		code    int
		out     string // a substring of standard output
		errText string // a substring of standard error
	}{
		{[]string{"top", "nothing"}, 0, "denials 0 (±0)\n\nmost denied:\nnone\n\nlargest admitted cost:\nnone\n", ""},
		{[]string{"top"}, 2, "", "top takes <limit> [<k>], got 0 arguments"},
		{[]string{"top", "search", "0"}, 2, "", `k "0" is not a number from 1 to 1000`},
		{[]string{"top", ""}, 2, "", "empty limit name"},
	} {
		code, out, errOut := sluice(t, addr, st.args...)
		if code != st.code || !strings.Contains(out, st.out) || !strings.Contains(errOut, st.errText) {
			t.Errorf("sluice %q = %d, stdout %q, stderr %q; want %d, %q, %q", st.args, code, out, errOut, st.code, st.out, st.errText)
		}
	}
}

// TestUsageMany: usage reads several keys at once, one line each, and a
// cap's in-flight count per key; its argument errors exit 2.
func TestUsageMany(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	lim, err := core.New(redistest.NewClient(t, addr), core.WithPrefix("clitest:"), core.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	ctx := t.Context()
	for key, n := range map[string]int{"tenant:acme": 3, "tenant:globex": 12} {
		for range n {
			lim.Allow(ctx, key, core.PerMinute(10))
		}
	}
	uploads, err := lim.PrepareConcurrency(core.ConcurrencyLimit{Name: "uploads", Max: 5})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ls, err := uploads.Acquire(ctx, "tenant:acme")
		if err != nil || !ls.Acquired {
			t.Fatal(ls, err)
		}
		defer ls.Release(ctx)
	}
	for _, st := range []struct {
		args    []string
		code    int
		out     string // standard output, or a substring of it
		errText string // a substring of standard error
	}{
		{[]string{"usage", "10/m", "--", "tenant:acme", "tenant:globex", "tenant:new"}, 0,
			"tenant:acme under 10/m: 7 of 10 left, full in 18s\ntenant:globex under 10/m: 0 of 10 left, full in 1m0s; next admitted in 6s\ntenant:new under 10/m: 10 of 10 left, full in 0s\n", ""},
		{[]string{"usage", "cap", "5", "uploads", "--", "tenant:acme", "tenant:globex"}, 0,
			"tenant:acme: 2 of 5 in flight under cap uploads\ntenant:globex: 0 of 5 in flight under cap uploads\n", ""},
		{[]string{"usage", "cap", "5", "--", "tenant:acme"}, 0, "tenant:acme: 0 of 5 in flight under cap\n", ""}, // another cap
		{[]string{"usage", "10/m", "--"}, 2, "", "give one or more keys after --"},
		{[]string{"usage", "cap", "five", "--", "k"}, 2, "", `max "five" is not a number`},
		{[]string{"usage", "cap", "0", "--", "k"}, 2, "", "concurrency Max 0"},
		{[]string{"usage", "10/m", "a", "b", "--", "k"}, 2, "", "got 3 arguments before --"},
		{[]string{"usage", "10/m", "", "--", "k"}, 2, "", "empty scope"},
	} {
		code, out, errOut := sluice(t, addr, st.args...)
		if code != st.code || !strings.Contains(out, st.out) || !strings.Contains(errOut, st.errText) {
			t.Errorf("sluice %q = %d, stdout %q, stderr %q; want %d, %q, %q", st.args, code, out, errOut, st.code, st.out, st.errText)
		}
	}
}
