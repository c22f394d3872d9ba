package replay

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Options tune [Simulate].
type Options struct {
	// Top is how many of the most denied keys each limit's report
	// lists. 0 lists none.
	Top int
	// DenyAtMost, above 0, asks for each limit's smallest version (see
	// [LimitReport.Smallest]) that alone would have denied at most this
	// fraction of the rule's events, 0.01 for 1%. 0 asks for none.
	DenyAtMost float64
}

// RuleReport is what a replay under one rule decided.
type RuleReport struct {
	// Rule is the rule's name.
	Rule string
	// Events is how many events the rule decided (see [Rule.Match]).
	Events int
	// Admitted and Denied count them by decision.
	Admitted, Denied int
	// Recorded is how many of them carry their recorded decision, and
	// Agreed how many of those the replay decided the same: a replay
	// under the limits that were in force agrees on every one.
	Recorded, Agreed int
	// Limits is a report per limit, level by level for a path, in the
	// rule's order.
	Limits []LimitReport
}

// LimitReport is what one limit of a rule decided.
type LimitReport struct {
	// Level is the limit's level, for a path; "" for a key.
	Level string
	// Limit is the limit.
	Limit core.Limit
	// Denied counts the denials this limit decided: of the limits that
	// deny, the one with the longest wait decides (see
	// [core.Result.Limit]); under a penalty lock, the limit that
	// reports it.
	Denied int
	// First is the first denial this limit decided; zero Time for none.
	First Denial
	// Top are the keys this limit denied most, most first (of a path,
	// the keys down to the limit's level, joined by "/").
	Top []KeyCount
	// Smallest is, with [Options.DenyAtMost], the smallest version of
	// the limit (its Rate, with Burst in the same proportion and no
	// smaller than the largest cost) that, alone, denies at most that
	// fraction of the rule's events; Found is false when none the
	// engine accepts (up to 2^40 a period) does.
	Smallest core.Limit
	// SmallestDenied is how many events Smallest denies.
	SmallestDenied int
	// Found reports whether Smallest was looked for and found.
	Found bool
}

// Denial is one denied event.
type Denial struct {
	Time time.Time
	Key  string
}

// KeyCount is a key and how often it was denied.
type KeyCount struct {
	Key   string
	Count int
}

// Simulate replays events (put in order by [Sort]) under each rule on
// its own (see [Replay]) and reports, per rule and per limit, what was
// admitted and denied.
func Simulate(events []Event, rules []Rule, o Options) ([]RuleReport, error) {
	var out []RuleReport
	for i := range rules {
		rep, err := simulate(events, &rules[i], o)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", rules[i].Name, err)
		}
		out = append(out, rep)
	}
	return out, nil
}

// limitID names a limit of a rule: its level and the limit.
type limitID struct {
	level string
	limit core.Limit
}

// simulate replays events under r.
func simulate(events []Event, r *Rule, o Options) (RuleReport, error) {
	rep := RuleReport{Rule: r.Name}
	index := map[limitID]int{}
	add := func(level string, l core.Limit) {
		if _, ok := index[limitID{level, l}]; !ok {
			index[limitID{level, l}] = len(rep.Limits)
			rep.Limits = append(rep.Limits, LimitReport{Level: level, Limit: l})
		}
	}
	for _, l := range r.Limits {
		add("", l)
	}
	for _, lv := range r.Levels {
		for _, l := range lv.Limits {
			add(lv.Name, l)
		}
	}
	denied := make([]map[string]int, len(rep.Limits))
	err := Replay(events, *r, func(i int, res core.Result) {
		ev := &events[i]
		rep.Events++
		if ev.Outcome != Unknown {
			rep.Recorded++
			if res.Allowed == (ev.Outcome == Admitted) {
				rep.Agreed++
			}
		}
		if res.Allowed {
			rep.Admitted++
			return
		}
		rep.Denied++
		j, ok := index[limitID{res.Level, res.Limit}]
		if !ok {
			return
		}
		lr := &rep.Limits[j]
		lr.Denied++
		key := keyAt(ev, r, res.Level)
		if lr.First.Time.IsZero() {
			lr.First = Denial{Time: ev.Time, Key: key}
		}
		if o.Top > 0 {
			if denied[j] == nil {
				denied[j] = map[string]int{}
			}
			denied[j][key]++
		}
	})
	if err != nil {
		return rep, err
	}
	for j := range rep.Limits {
		rep.Limits[j].Top = top(denied[j], o.Top)
	}
	if o.DenyAtMost > 0 {
		for j := range rep.Limits {
			if err := smallest(events, r, &rep.Limits[j], rep.Events, o.DenyAtMost); err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// keyAt is the key of ev a denial at level names: the key itself, or
// the path's keys down to the level, joined by "/".
func keyAt(ev *Event, r *Rule, level string) string {
	if ev.Path == nil {
		return ev.Key
	}
	n := len(ev.Path)
	for i, lv := range r.Levels {
		if lv.Name == level {
			n = min(n, i+1)
		}
	}
	return strings.Join(ev.Path[:n], "/")
}

// top returns the n keys of counts with the most denials, most first
// (equals by key).
func top(counts map[string]int, n int) []KeyCount {
	if n <= 0 || len(counts) == 0 {
		return nil
	}
	kcs := make([]KeyCount, 0, len(counts))
	for k, c := range counts {
		kcs = append(kcs, KeyCount{k, c})
	}
	slices.SortFunc(kcs, func(a, b KeyCount) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return kcs[:min(n, len(kcs))]
}

// smallest finds, by bisection on the Rate, the smallest version of
// lr's limit that alone (on its level, for a path, with the rule's
// charging by status and no penalty) denies at most frac of the rule's
// n events. The fewer a limit's tokens, the more it denies; bisection
// takes that as given.
func smallest(events []Event, r *Rule, lr *LimitReport, n int, frac float64) error {
	maxCost := 1
	for i := range events {
		if r.applies(&events[i]) {
			maxCost = max(maxCost, events[i].Cost)
		}
	}
	allowed := int(math.Floor(frac * float64(n)))
	try := func(rate int) (int, core.Limit, error) {
		l := scaled(lr.Limit, rate, maxCost)
		alone := Rule{Name: r.Name, Charged: r.Charged, Match: r.Match}
		if r.Levels != nil {
			alone.Levels = make([]core.Level, len(r.Levels))
			for i, lv := range r.Levels {
				alone.Levels[i] = core.Level{Name: lv.Name, Limits: []core.Limit{unlimited()}}
				if lv.Name == lr.Level {
					alone.Levels[i].Limits = []core.Limit{l}
				}
			}
		} else {
			alone.Limits = []core.Limit{l}
		}
		d := 0
		err := Replay(events, alone, func(_ int, res core.Result) {
			if !res.Allowed {
				d++
			}
		})
		return d, l, err
	}
	lo, hi := 0, max(1, lr.Limit.Rate) // lo denies too many (or is 0), hi is to be checked
	for {
		d, l, err := try(hi)
		if err != nil {
			return nil // a version the engine refuses: none found
		}
		if d <= allowed {
			lr.Smallest, lr.SmallestDenied, lr.Found = l, d, true
			break
		}
		if hi >= 1<<40 {
			return nil
		}
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		d, l, err := try(mid)
		if err == nil && d <= allowed {
			hi = mid
			lr.Smallest, lr.SmallestDenied = l, d
		} else {
			lo = mid
		}
	}
	return nil
}

// scaled is l at rate events per period, its Burst in the same
// proportion (rounded up) and at least maxCost.
func scaled(l core.Limit, rate, maxCost int) core.Limit {
	s := l
	s.Rate = rate
	if l.Rate > 0 {
		s.Burst = int(math.Ceil(float64(l.Burst) * float64(rate) / float64(l.Rate)))
	}
	s.Burst = max(s.Burst, maxCost)
	if s.Refill == core.RefillDaily || s.Refill == core.RefillWeekly || s.Refill == core.RefillMonthly {
		s.Rate = max(rate, maxCost)
		s.Burst = s.Rate
	}
	return s
}

// unlimited is a limit for a level whose own limits are not under
// study: 2^30 tokens a second, which no event of a log denies (a cost
// above 2^30 is not one a limit admits either).
func unlimited() core.Limit {
	return core.Limit{Rate: 1 << 30, Period: time.Second, Burst: 1 << 30}
}

// Print writes reports as text, one block per rule.
func Print(w io.Writer, reports []RuleReport, o Options) {
	for _, rep := range reports {
		fmt.Fprintf(w, "rule %s: %d events, %d admitted, %d denied (%s)\n", rep.Rule, rep.Events, rep.Admitted, rep.Denied, percent(rep.Denied, rep.Events))
		if rep.Recorded > 0 {
			fmt.Fprintf(w, "  recorded decisions: %d, the same in the replay: %d\n", rep.Recorded, rep.Agreed)
		}
		for _, lr := range rep.Limits {
			name := lr.Limit.String()
			if lr.Level != "" {
				name = lr.Level + ": " + name
			}
			fmt.Fprintf(w, "  %s: %d denied", name, lr.Denied)
			if !lr.First.Time.IsZero() {
				fmt.Fprintf(w, ", first at %s (%s)", lr.First.Time.UTC().Format(timeLayout), lr.First.Key)
			}
			fmt.Fprintln(w)
			for _, kc := range lr.Top {
				fmt.Fprintf(w, "    %6d  %s\n", kc.Count, kc.Key)
			}
			switch {
			case o.DenyAtMost <= 0:
			case lr.Found:
				fmt.Fprintf(w, "    smallest alone denying at most %g%%: %s (denies %d)\n", o.DenyAtMost*100, lr.Smallest.String(), lr.SmallestDenied)
			default:
				fmt.Fprintf(w, "    no version the engine can count exactly denies at most %g%%\n", o.DenyAtMost*100)
			}
		}
	}
}

// percent is n of total as a percentage.
func percent(n, total int) string {
	if total == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(total))
}
