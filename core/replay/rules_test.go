package replay_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/replay"
)

func TestParseRules(t *testing.T) {
	rules, err := replay.ParseRules(strings.NewReader(`# a comment

current   key   600/m
tight     key   10/s burst 2; 100/m   | penalty 1m | match tenant:
login     key   5/15m name login      | charge-if 401,403,500-599
tiers     path  org=1000/h > user=60/m; 5/s
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 4 {
		t.Fatalf("%d rules, want 4", len(rules))
	}
	if r := rules[1]; r.Name != "tight" || !reflect.DeepEqual(r.Limits, []core.Limit{core.PerSecond(10).WithBurst(2), core.PerMinute(100)}) ||
		r.Penalty != time.Minute || r.Match != "tenant:" {
		t.Fatalf("rule 2 = %+v", r)
	}
	if f := rules[2].Charged; f == nil || !f(401) || f(404) || !f(503) || f(200) {
		t.Fatal("charge-if 401,403,500-599 does not charge as written")
	}
	if r := rules[3]; len(r.Levels) != 2 || r.Levels[0].Name != "org" || r.Levels[1].Name != "user" || len(r.Levels[1].Limits) != 2 {
		t.Fatalf("rule 4 = %+v", r)
	}
	bad := []struct{ text, want string }{
		{"", "no rules"},
		{"a key", "line 1"},
		{"a kind 5/s", `kind "kind"`},
		{"a key 5/q", "line 1"},
		{"a key 5/s\na key 6/s", `line 2: a second rule named "a"`},
		{"a key 5/s | penalty -1s", "penalty"},
		{"a key 5/s | charge-if 700", "charge-if"},
		{"a key 5/s | charge-if 500-400", "charge-if"},
		{"a key 5/s | colour blue", `option "colour blue"`},
		{"a key 5/s | match", "match"},
		{"a path org", "level"},
		{"a path org=5/s > org=6/s", "two levels"},
		{"a path =5/s", "level"},
		{"ok key 5/s\nbad key 0/s\nworse key 5/s | penalty x", "line 2"},
	}
	for _, tt := range bad {
		_, err := replay.ParseRules(strings.NewReader(tt.text))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseRules(%q) = %v, want an error with %q", tt.text, err, tt.want)
		}
	}
}

// at returns events of key k at the given milliseconds after t0.
func at(k string, ms ...int) []replay.Event {
	t0 := time.Date(2026, 11, 28, 22, 0, 0, 0, time.UTC)
	var evs []replay.Event
	for _, m := range ms {
		evs = append(evs, replay.Event{Time: t0.Add(time.Duration(m) * time.Millisecond), Key: k, Cost: 1})
	}
	return evs
}

// decisions replays events under rule and returns each one's decision,
// "a" admitted, "d" denied, "-" passed by.
func decisions(t *testing.T, events []replay.Event, rule replay.Rule) string {
	t.Helper()
	out := []byte(strings.Repeat("-", len(events)))
	if err := replay.Replay(events, rule, func(i int, res core.Result) {
		out[i] = 'd'
		if res.Allowed {
			out[i] = 'a'
		}
	}); err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestReplayRules(t *testing.T) {
	two := at("k", 0, 10, 20, 30, 600, 1100)
	status := at("k", 0, 10, 20, 30)
	status[0].Status, status[1].Status, status[2].Status, status[3].Status = 500, 200, 500, 500
	path := []replay.Event{
		{Time: two[0].Time, Path: []string{"acme", "alice"}, Cost: 1},
		{Time: two[1].Time, Path: []string{"acme", "bob"}, Cost: 1},
		{Time: two[2].Time, Path: []string{"acme", "alice"}, Cost: 1},
		{Time: two[3].Time, Path: []string{"acme"}, Cost: 1},
		{Time: two[3].Time, Key: "not a path", Cost: 1},
	}
	tests := []struct {
		name   string
		events []replay.Event
		rule   replay.Rule
		want   string
	}{
		// Two tokens at 0 ms; 1.2 again by 600 ms, and by 1100 ms.
		{"two a second", two, replay.Rule{Limits: []core.Limit{core.PerSecond(2)}}, "aaddaa"},
		// The denial at 20 ms locks the key until 820 ms.
		{"penalty", two, replay.Rule{Limits: []core.Limit{core.PerSecond(2)}, Penalty: 800 * time.Millisecond}, "aaddda"},
		// Only 500s are charged: the 200 at 10 ms is refunded at once.
		{"charge-if", status, replay.Rule{Limits: []core.Limit{core.PerSecond(2)}, Charged: func(s int) bool { return s >= 500 }}, "aaad"},
		{"match", append(at("a:1", 0, 1, 2), at("b:1", 3, 4, 5)...), replay.Rule{Limits: []core.Limit{core.PerSecond(2)}, Match: "a:"}, "aad---"},
		{"cost over the burst", []replay.Event{{Time: two[0].Time, Key: "k", Cost: 3}}, replay.Rule{Limits: []core.Limit{core.PerSecond(2)}}, "d"},
		// Alice's 1 a second denies her second request (which charges
		// the org nothing), so the org's third token is left for the
		// request of the org alone.
		{"path", path, replay.Rule{Levels: []core.Level{{Name: "org", Limits: []core.Limit{core.PerSecond(3)}}, {Name: "user", Limits: []core.Limit{core.PerSecond(1)}}}}, "aada-"},
		{"calendar day", at("k", 0, 1, 2), replay.Rule{Limits: []core.Limit{core.PerCalendarDay(2, "Europe/Paris")}}, "aad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decisions(t, tt.events, tt.rule); got != tt.want {
				t.Fatalf("decisions %s, want %s", got, tt.want)
			}
		})
	}
}

// TestSimulateReport checks a report's counts, first denial, top keys
// and the smallest limit.
func TestSimulateReport(t *testing.T) {
	events := append(at("k1", 0, 100, 200, 300, 400), at("k2", 50, 150, 250)...)
	events[0].Outcome = replay.Admitted
	events[4].Outcome = replay.Admitted
	replay.Sort(events)
	reps, err := replay.Simulate(events, []replay.Rule{{Name: "r", Limits: []core.Limit{core.PerSecond(2)}}}, replay.Options{Top: 1, DenyAtMost: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	r := reps[0]
	lr := r.Limits[0]
	t0 := time.Date(2026, 11, 28, 22, 0, 0, 0, time.UTC)
	// k1 at 0, 100, 200, 300, 400 ms: admitted, admitted, then denied
	// (0.4, 0.6, 0.8 tokens); k2 at 50, 150, 250 ms: the third denied.
	// Of the two recorded decisions, k1's last (admitted) is not the
	// replay's.
	if r.Events != 8 || r.Admitted != 4 || r.Denied != 4 || r.Recorded != 2 || r.Agreed != 1 {
		t.Fatalf("report %+v", r)
	}
	if lr.Denied != 4 || lr.First != (replay.Denial{Time: t0.Add(200 * time.Millisecond), Key: "k1"}) ||
		!reflect.DeepEqual(lr.Top, []replay.KeyCount{{Key: "k1", Count: 3}}) {
		t.Fatalf("limit report %+v", lr)
	}
	// 3 a second denies k1's fourth only (8 events, at most 2 denied); 2
	// a second denies 4.
	if !lr.Found || lr.Smallest != core.PerSecond(3) || lr.SmallestDenied != 1 {
		t.Fatalf("smallest %v (found %v, denies %d), want 3/s", lr.Smallest, lr.Found, lr.SmallestDenied)
	}
}

// TestSimulateSmallestOnAPath checks the search on a path's levels: each
// level's limit is replayed with the other levels unlimited.
func TestSimulateSmallestOnAPath(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 22, 0, 0, 0, time.UTC)
	var events []replay.Event
	for i, p := range [][]string{{"acme", "alice"}, {"acme", "alice"}, {"acme", "bob"}, {"acme", "alice"}, {"acme"}} {
		events = append(events, replay.Event{Time: t0.Add(time.Duration(i) * 100 * time.Millisecond), Path: p, Cost: 1})
	}
	rule := replay.Rule{Name: "api", Levels: []core.Level{{Name: "org", Limits: []core.Limit{core.PerSecond(3)}}, {Name: "user", Limits: []core.Limit{core.PerSecond(1)}}}}
	reps, err := replay.Simulate(events, []replay.Rule{rule}, replay.Options{DenyAtMost: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	org, user := reps[0].Limits[0], reps[0].Limits[1]
	// Of five requests, one may be denied. Alone, the org at 3 a second
	// denies the one at 0.3 s (0.9 tokens), at 2 three; alice's user
	// level at 2 a second denies her third (0.6 tokens), at 1 two.
	if !org.Found || org.Smallest != core.PerSecond(3) || !user.Found || user.Smallest != core.PerSecond(2) {
		t.Fatalf("smallest: org %v (%v), user %v (%v); want 3/s and 2/s", org.Smallest, org.Found, user.Smallest, user.Found)
	}
}
