package replay

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Rule is one set of limits a replay decides events under, as a
// middleware would: the limits of a key, or the levels of a path, with
// the middleware's penalty lock and charging by status. Each rule keeps
// its own buckets, so rules replayed together do not affect each other.
type Rule struct {
	// Name names the rule in reports.
	Name string
	// Limits are the limits of a rule of one key ([core.Rule]); nil for
	// a path.
	Limits []core.Limit
	// Levels are the levels of a path ([core.PathRule]), root first;
	// nil for a key.
	Levels []core.Level
	// Penalty is the lock a denial sets (see [core.Rule.WithPenalty]);
	// 0 for none.
	Penalty time.Duration
	// Charged reports whether a response's status is charged, as
	// policy.WithChargeIf's predicate does: an event of a known status
	// it refuses is reserved, then refunded at the same instant. nil
	// charges every event.
	Charged func(status int) bool
	// Match, if not empty, is the prefix of the keys the rule decides
	// (of the root's key, for a path); the others pass it by.
	Match string
}

// applies reports whether r decides ev.
func (r *Rule) applies(ev *Event) bool {
	if r.Levels != nil {
		return ev.Path != nil && len(ev.Path) <= len(r.Levels) && strings.HasPrefix(ev.Path[0], r.Match)
	}
	return ev.Path == nil && strings.HasPrefix(ev.Key, r.Match)
}

// ParseRules reads rules from the limits file format, one rule a line
// (see the package documentation):
//
//	# name   kind  limits, or a path's levels  | options
//	current  key   600/m
//	proposed key   300/m burst 100; 5000/h     | penalty 1m
//	login    key   5/15m                       | charge-if 400-499 | match user:
//	tiers    path  org=1000/h > user=60/m; 5/s
//
// Limits are written as [core.ParseLimit] reads them, several separated
// by ";"; a path's levels as name=limits, root first, separated by ">".
// Options: penalty <duration>, charge-if <statuses> (codes and ranges
// separated by commas: the statuses charged), match <key prefix>. Blank
// lines and lines starting with # are skipped. An error names the line
// and what is wrong with it.
func ParseRules(r io.Reader) ([]Rule, error) {
	var rules []Rule
	var errs []error
	err := scanLines(r, func(n int, b []byte, tooLong bool) {
		s := strings.TrimSpace(string(b))
		if tooLong {
			errs = append(errs, fmt.Errorf("line %d: longer than %d bytes", n, MaxLine))
			return
		}
		if s == "" || s[0] == '#' {
			return
		}
		rl, err := parseRule(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", n, err))
			return
		}
		for _, o := range rules {
			if o.Name == rl.Name {
				errs = append(errs, fmt.Errorf("line %d: a second rule named %q", n, rl.Name))
				return
			}
		}
		rules = append(rules, rl)
	})
	if err != nil {
		return nil, err
	}
	if len(errs) == 0 && len(rules) == 0 {
		return nil, errors.New("no rules")
	}
	return rules, errors.Join(errs...)
}

// parseRule reads one line of the limits file.
func parseRule(s string) (Rule, error) {
	parts := strings.Split(s, "|")
	f := strings.Fields(parts[0])
	if len(f) < 3 {
		return Rule{}, fmt.Errorf("%q: want <name> key|path <limits>, then any | <option>", s)
	}
	rl := Rule{Name: f[0]}
	spec := strings.TrimSpace(parts[0])
	spec = strings.TrimSpace(spec[len(f[0]):])
	spec = strings.TrimSpace(spec[len(f[1]):])
	var err error
	switch f[1] {
	case "key":
		rl.Limits, err = parseLimits(spec)
	case "path":
		rl.Levels, err = parseLevels(spec)
	default:
		return Rule{}, fmt.Errorf("rule %q: kind %q: want key or path", rl.Name, f[1])
	}
	if err != nil {
		return Rule{}, fmt.Errorf("rule %q: %w", rl.Name, err)
	}
	for _, o := range parts[1:] {
		if err := rl.option(strings.TrimSpace(o)); err != nil {
			return Rule{}, fmt.Errorf("rule %q: %w", rl.Name, err)
		}
	}
	return rl, rl.check()
}

// check prepares r on a memory limiter, to refuse what the engine would.
func (r *Rule) check() error {
	lim, err := core.NewMemory()
	if err != nil {
		return err
	}
	if _, err := r.prepare(lim); err != nil {
		return fmt.Errorf("rule %q: %w", r.Name, err)
	}
	return nil
}

// parseLimits reads limits separated by ";".
func parseLimits(s string) ([]core.Limit, error) {
	var ls []core.Limit
	for t := range strings.SplitSeq(s, ";") {
		l, err := core.ParseLimit(strings.TrimSpace(t))
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// parseLevels reads a path's levels: name=limits separated by ">".
func parseLevels(s string) ([]core.Level, error) {
	var lvs []core.Level
	for t := range strings.SplitSeq(s, ">") {
		name, limits, ok := strings.Cut(strings.TrimSpace(t), "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("level %q: want <name>=<limits>", strings.TrimSpace(t))
		}
		ls, err := parseLimits(limits)
		if err != nil {
			return nil, fmt.Errorf("level %q: %w", name, err)
		}
		lvs = append(lvs, core.Level{Name: name, Limits: ls})
	}
	return lvs, nil
}

// option reads one option of a rule's line.
func (r *Rule) option(s string) error {
	word, arg, _ := strings.Cut(s, " ")
	arg = strings.TrimSpace(arg)
	switch word {
	case "penalty":
		d, err := time.ParseDuration(arg)
		if err != nil || d <= 0 {
			return fmt.Errorf("penalty %q: want a positive Go duration, such as 15m", arg)
		}
		r.Penalty = d
	case "charge-if":
		f, err := parseStatuses(arg)
		if err != nil {
			return fmt.Errorf("charge-if %q: %w", arg, err)
		}
		r.Charged = f
	case "match":
		if arg == "" {
			return errors.New("match: want a key prefix")
		}
		r.Match = arg
	default:
		return fmt.Errorf("option %q: want penalty, charge-if or match", s)
	}
	return nil
}

// parseStatuses reads status codes and ranges, such as "400-499,503",
// into a predicate.
func parseStatuses(s string) (func(int) bool, error) {
	type span struct{ lo, hi int }
	var spans []span
	for t := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(t), "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 100 || b > 599 || a > b {
			return nil, fmt.Errorf("%q: want a status or a range of them, 100 to 599, such as 401 or 400-499", strings.TrimSpace(t))
		}
		spans = append(spans, span{a, b})
	}
	return func(status int) bool {
		for _, sp := range spans {
			if sp.lo <= status && status <= sp.hi {
				return true
			}
		}
		return false
	}, nil
}
