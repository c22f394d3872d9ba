package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// ParseLimit reads a limit written as text, as configuration files hold
// them:
//
//	600/m                  600 a minute, burst 600
//	100/s burst 20         100 a second, at most 20 at once
//	5/15m name login       5 per 15 minutes, named "login"
//	1000/d                 1000 a day
//	7/1.5s burst 4         any Go duration, and days as "2d"
//	10/m burst 50 refill interval
//	                       10 at once every minute, at most 50 (RefillInterval)
//	1000/calendar-day zone America/New_York
//	                       1000 per day, restored at New York's midnight
//	5000/calendar-week     per week from Monday, UTC
//	20000/calendar-month zone Europe/Paris
//	1000-H                 1000 an hour: <rate>-<S|M|H|D>, as other
//	                       Go rate limiters write it
//
// The period is a unit (ms, s, sec, second, m, min, minute, h, hour, d,
// day, plurals too) or a number with one (15m, 1.5s, 1h30m, 2d), or a
// calendar period (calendar-day, calendar-week, calendar-month), which
// takes a zone (an IANA name; UTC without one) and no burst. The hyphen
// form's unit is one letter, either case: S a second, M a minute (not a
// month), H an hour, D 24 hours; "1000-H burst 50" takes the same words
// after it as the slash form. "refill"
// takes interval or continuous (the default). Burst defaults to the rate,
// as [PerMinute] does. A name is a bare word or a quoted string. Keywords
// are case-insensitive and may be separated by commas. The result is
// validated: an error wraps [ErrInvalidLimit] and quotes the text.
func ParseLimit(s string) (Limit, error) {
	l, err := parseLimit(s)
	if err != nil {
		return Limit{}, fmt.Errorf("%w: limit %q: %s", ErrInvalidLimit, s, err)
	}
	if _, err := compileLimit(l); err != nil {
		return Limit{}, fmt.Errorf("limit %q: %w", s, err)
	}
	return l, nil
}

func parseLimit(s string) (Limit, error) {
	words, err := limitWords(s)
	if err != nil {
		return Limit{}, err
	}
	if len(words) == 0 {
		return Limit{}, errors.New("empty; want <rate>/<period>, such as 600/m")
	}
	rate, period, ok := strings.Cut(words[0], "/")
	if !ok {
		if rate, period, ok = cutHyphenForm(words[0]); !ok {
			return Limit{}, fmt.Errorf("%q has no '/'; want <rate>/<period>, such as 600/m, or <rate>-<S|M|H|D>, such as 1000-H", words[0])
		}
	}
	var l Limit
	n, err := strconv.Atoi(rate)
	if err != nil || n < 1 {
		return Limit{}, fmt.Errorf("rate %q is not a whole number of at least 1", rate)
	}
	l.Rate = n
	if r, ok := calendarPeriods[strings.ToLower(period)]; ok {
		l.Refill = r
	} else if l.Period, err = parsePeriod(period); err != nil {
		return Limit{}, err
	}
	l.Burst = l.Rate
	for rest := words[1:]; len(rest) > 0; rest = rest[2:] {
		if len(rest) < 2 {
			return Limit{}, fmt.Errorf("%q needs a value after it", rest[0])
		}
		if err := l.setWord(rest[0], rest[1]); err != nil {
			return Limit{}, err
		}
	}
	return l, nil
}

// setWord applies one "<word> <value>" pair that follows <rate>/<period>
// in the text form: burst, refill, zone (or in), name.
func (l *Limit) setWord(word, val string) error {
	var err error
	switch strings.ToLower(word) {
	case "burst":
		if l.Burst, err = strconv.Atoi(val); err != nil || l.Burst < 1 {
			return fmt.Errorf("burst %q is not a whole number of at least 1", val)
		}
	case "refill":
		switch r := Refill(strings.ToLower(val)); {
		case l.Refill.calendar():
			return fmt.Errorf("refill %q with a calendar period; the period says how it refills", val)
		case r == RefillInterval:
			l.Refill = r
		case r == "continuous":
			l.Refill = RefillContinuous
		default:
			return fmt.Errorf("refill %q is neither interval nor continuous (for calendar quotas write <rate>/calendar-day)", val)
		}
	case "zone", "in":
		if l.Zone, err = unquoteWord(val); err != nil {
			return fmt.Errorf("zone %s: %v", val, err)
		}
	case "name":
		if !strings.HasPrefix(val, `"`) {
			l.Name = val
		} else if l.Name, err = strconv.Unquote(val); err != nil {
			return fmt.Errorf("name %s: %v", val, err)
		}
	default:
		return fmt.Errorf("unknown word %q; after <rate>/<period> come \"burst <n>\", \"refill interval\", \"zone <zone>\" and \"name <name>\"", word)
	}
	return nil
}

// hyphenUnits are the units of the "<rate>-<unit>" form, upper case.
var hyphenUnits = map[string]string{"S": "s", "M": "m", "H": "h", "D": "d"}

// cutHyphenForm splits "<rate>-<unit>", such as "1000-H", into the rate
// and the unit as the slash form names it ("h"). It reports false for
// any other word, so that the slash form's message explains the mistake.
func cutHyphenForm(w string) (rate, period string, ok bool) {
	i := strings.LastIndexByte(w, '-')
	if i < 1 {
		return "", "", false
	}
	period, ok = hyphenUnits[strings.ToUpper(w[i+1:])]
	if !ok {
		return "", "", false
	}
	return w[:i], period, true
}

// MustParseLimit is like [ParseLimit] but panics if s is not a valid
// limit. It is for package-level variables and other limits written in
// the program's source, where a mistake is the programmer's and should
// stop the program at start:
//
//	var loginLimit = core.MustParseLimit("5/15m name login")
//
// Limits read at run time (configuration files, flags, environment) go
// through ParseLimit, so that a bad value is an error to report. The
// panic's value is an error whose message starts with "core:" and which
// wraps [ErrInvalidLimit].
func MustParseLimit(s string) Limit {
	l, err := ParseLimit(s)
	if err != nil {
		panic(fmt.Errorf("core: MustParseLimit: %w", err))
	}
	return l
}

// unquoteWord returns a word as it is, or a Go-quoted one unquoted.
func unquoteWord(w string) (string, error) {
	if strings.HasPrefix(w, `"`) {
		return strconv.Unquote(w)
	}
	return w, nil
}

// calendarPeriods are the periods of calendar refills, as text.
var calendarPeriods = map[string]Refill{
	"calendar-day": RefillDaily, "calendar-week": RefillWeekly, "calendar-month": RefillMonthly,
}

// calendarPeriod is r's period as text.
func calendarPeriod(r Refill) string {
	switch r {
	case RefillWeekly:
		return "calendar-week"
	case RefillMonthly:
		return "calendar-month"
	}
	return "calendar-day"
}

// limitWords splits s at spaces and commas, keeping a Go-quoted string
// (with its quotes) as one word.
func limitWords(s string) ([]string, error) {
	var words []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',':
			i++
		case c == '"':
			end := quotedEnd(s[i:])
			if end < 0 {
				return nil, fmt.Errorf("%s has no closing quote", s[i:])
			}
			words = append(words, s[i:i+end])
			i += end
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n\r,\"", rune(s[j])) {
				j++
			}
			words = append(words, s[i:j])
			i = j
		}
	}
	return words, nil
}

// quotedEnd returns the end of the Go-quoted string at the start of s, or
// -1.
func quotedEnd(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// periodUnits are the periods that may be written as a bare unit.
var periodUnits = map[string]time.Duration{
	"us": time.Microsecond, "µs": time.Microsecond,
	"ms": time.Millisecond, "millisecond": time.Millisecond, "milliseconds": time.Millisecond,
	"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
}

// parsePeriod reads a bare unit, a Go duration, or whole days ("2d").
func parsePeriod(s string) (time.Duration, error) {
	if d, ok := periodUnits[strings.ToLower(s)]; ok {
		return d, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 1 && n <= 100*365 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("period %q is not a unit (s, m, h, d, ...) or a positive duration (15m, 1.5s, 2d)", s)
	}
	return d, nil
}

// formatPeriod writes d as ParseLimit reads it, shortest first: "m" for a
// minute, "15m", "2d", else Go's form ("1.5s", "1h30m0s").
func formatPeriod(d time.Duration) string {
	for _, u := range [...]struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d > 0 && d%u.d == 0 {
			if d == u.d {
				return u.name
			}
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String()
}

// MarshalText writes l as [ParseLimit] reads it: "600/m", "100/s burst 20",
// "5/15m name login", "10/m burst 50 refill interval",
// "1000/calendar-day zone America/New_York". Burst is left out when it equals Rate. An invalid
// limit is an error, so that a configuration is never written that cannot
// be read back.
func (l Limit) MarshalText() ([]byte, error) {
	if _, err := compileLimit(l); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 32)
	b = strconv.AppendInt(b, int64(l.Rate), 10)
	b = append(b, '/')
	if l.Refill.calendar() {
		b = append(b, calendarPeriod(l.Refill)...)
	} else {
		b = append(b, formatPeriod(l.Period)...)
	}
	if l.Burst != l.Rate {
		b = append(b, " burst "...)
		b = strconv.AppendInt(b, int64(l.Burst), 10)
	}
	if l.Refill == RefillInterval {
		b = append(b, " refill interval"...)
	}
	if l.Zone != "" {
		b = append(b, " zone "...)
		if bareName(l.Zone) {
			b = append(b, l.Zone...)
		} else {
			b = strconv.AppendQuote(b, l.Zone)
		}
	}
	if l.Name != "" {
		b = append(b, " name "...)
		if bareName(l.Name) {
			b = append(b, l.Name...)
		} else {
			b = strconv.AppendQuote(b, l.Name)
		}
	}
	return b, nil
}

// bareName reports whether name reads back unquoted.
func bareName(name string) bool {
	if name == "" || strings.HasPrefix(name, `"`) {
		return false
	}
	for _, r := range name {
		if unicode.IsSpace(r) || r == ',' || r == '"' || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// UnmarshalText reads l as [ParseLimit] does, so that TOML, YAML and
// environment-variable decoders take "600/m".
func (l *Limit) UnmarshalText(text []byte) error {
	v, err := ParseLimit(string(text))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// limitFields is a limit written field by field, with the period as a
// duration string ("1m") or, as before, nanoseconds.
type limitFields struct {
	Name   string          `json:"name"`
	Rate   int             `json:"rate"`
	Period json.RawMessage `json:"period"`
	Burst  int             `json:"burst"`
	Refill Refill          `json:"refill"`
	Zone   string          `json:"zone"`
}

// UnmarshalJSON reads a limit as a string ("600/m", see [ParseLimit]) or as
// an object {"rate": 600, "period": "1m", "burst": 50, "name": "api"}, the
// period a duration string or nanoseconds, the burst defaulting to the
// rate, with "refill" and "zone" for stepped refills ({"rate": 1000,
// "refill": "daily", "zone": "America/New_York"}, no period). Unknown
// fields are errors, and the result is validated.
func (l *Limit) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		return l.UnmarshalText([]byte(s))
	}
	var f limitFields
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return fmt.Errorf("%w: %v (want \"600/m\" or {\"rate\": 600, \"period\": \"1m\", \"burst\": 50})", ErrInvalidLimit, err)
	}
	var period time.Duration
	switch {
	case (len(f.Period) == 0 || string(f.Period) == "null") && f.Refill.calendar():
	case len(f.Period) == 0 || string(f.Period) == "null":
		return fmt.Errorf("%w: limit %s has no period", ErrInvalidLimit, data)
	case f.Period[0] == '"':
		var s string
		if err := json.Unmarshal(f.Period, &s); err != nil {
			return err
		}
		d, err := parsePeriod(s)
		if err != nil {
			return fmt.Errorf("%w: limit %s: %s", ErrInvalidLimit, data, err)
		}
		period = d
	default:
		var ns int64
		if err := json.Unmarshal(f.Period, &ns); err != nil {
			return fmt.Errorf("%w: limit %s: period %s is neither a duration string nor nanoseconds", ErrInvalidLimit, data, f.Period)
		}
		period = time.Duration(ns)
	}
	return l.setFields(Limit{Name: f.Name, Rate: f.Rate, Period: period, Burst: f.Burst, Refill: f.Refill, Zone: f.Zone}, string(data))
}

// MarshalJSON writes l as its text form (see [Limit.MarshalText]).
func (l Limit) MarshalJSON() ([]byte, error) {
	t, err := l.MarshalText()
	if err != nil {
		return nil, err
	}
	return json.Marshal(string(t))
}

// UnmarshalYAML reads a limit from YAML as a string ("600/m") or a mapping
// with rate, period ("1m"), burst (defaulting to the rate), name, and
// refill and zone for stepped refills (see [Limit.UnmarshalJSON]). It
// takes the decoder's unmarshal function, which gopkg.in/yaml.v2 and v3,
// go.yaml.in/yaml and goccy/go-yaml all pass, so core needs no YAML
// library.
func (l *Limit) UnmarshalYAML(unmarshal func(any) error) error {
	var s string
	if err := unmarshal(&s); err == nil {
		return l.UnmarshalText([]byte(s))
	}
	var f struct {
		Name   string `yaml:"name"`
		Rate   int    `yaml:"rate"`
		Period any    `yaml:"period"`
		Burst  int    `yaml:"burst"`
		Refill string `yaml:"refill"`
		Zone   string `yaml:"zone"`
	}
	if err := unmarshal(&f); err != nil {
		return fmt.Errorf("%w: %v (want \"600/m\" or rate, period and burst)", ErrInvalidLimit, err)
	}
	var d time.Duration
	switch p := f.Period.(type) {
	case nil:
		if Refill(f.Refill).calendar() {
			break
		}
		return fmt.Errorf("%w: limit with rate %d has no period", ErrInvalidLimit, f.Rate)
	case string:
		var err error
		if d, err = parsePeriod(p); err != nil {
			return fmt.Errorf("%w: limit with rate %d: %s", ErrInvalidLimit, f.Rate, err)
		}
	case int:
		d = time.Duration(p) // nanoseconds, as before
	case int64:
		d = time.Duration(p)
	case uint64:
		d = time.Duration(min(p, 1<<62))
	default:
		return fmt.Errorf("%w: limit with rate %d: period %v is neither a duration string nor nanoseconds", ErrInvalidLimit, f.Rate, p)
	}
	return l.setFields(Limit{Name: f.Name, Rate: f.Rate, Period: d, Burst: f.Burst, Refill: Refill(f.Refill), Zone: f.Zone},
		fmt.Sprintf("rate %d, period %v", f.Rate, f.Period))
}

// setFields sets l to decoded fields v, the burst defaulting to the rate,
// and validates it; what names the source in errors.
func (l *Limit) setFields(v Limit, what string) error {
	if v.Burst == 0 {
		v.Burst = v.Rate
	}
	if _, err := compileLimit(v); err != nil {
		return fmt.Errorf("limit %s: %w", what, err)
	}
	*l = v
	return nil
}
