package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// Event is one recorded request: when it was decided, what for (a key,
// or a path of keys), what it cost, and, when known, its response's
// status and the decision it got.
type Event struct {
	// Time is the instant of the decision, to the microsecond: for a
	// recording, [core.Result.Time], the clock the decision was made on.
	Time time.Time
	// Key is the key decided; "" when Path is set.
	Key string
	// Path is a path's keys, root first (see [core.PathRule]); nil for
	// a key.
	Path []string
	// Cost is the tokens the request took or asked for, at least 1.
	Cost int
	// Status is the response's HTTP status, 100 to 599; 0: not known.
	Status int
	// Outcome is the decision the request got when it was recorded.
	Outcome Outcome
}

// Outcome is a recorded decision.
type Outcome int8

const (
	// Unknown: the line says nothing of the decision.
	Unknown Outcome = iota
	// Admitted: the request was admitted.
	Admitted
	// Denied: the request was denied.
	Denied
)

// MaxLine is the longest line [Read] accepts, in bytes; a longer one is
// reported as bad and skipped.
const MaxLine = 64 << 10

// maxCost bounds an event's cost: a limit's Burst cannot be larger in
// practice, and the bound keeps the arithmetic exact.
const maxCost = 1 << 40

// line is an event as one JSON object.
type line struct {
	Time    string   `json:"time"`
	Key     string   `json:"key,omitempty"`
	Path    []string `json:"path,omitempty"`
	Cost    *int64   `json:"cost,omitempty"`
	Status  int      `json:"status,omitempty"`
	Allowed *bool    `json:"allowed,omitempty"`
}

// timeLayout is how a line writes its time: RFC 3339, in UTC, to the
// microsecond.
const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

// ParseLine reads one event from a line of the log format (see the
// package documentation). It returns an error naming what is wrong for
// anything else: malformed JSON, a missing or malformed time, neither or
// both of key and path, an empty key, a cost below 1 or above 2^40, a
// status outside 100 to 599.
func ParseLine(b []byte) (Event, error) {
	l, ok := parseFast(b)
	if !ok {
		l = line{}
		if err := decodeLine(b, &l); err != nil {
			return Event{}, err
		}
	}
	return l.event()
}

// decodeLine decodes b into l with encoding/json.
func decodeLine(b []byte, l *line) error {
	if err := json.Unmarshal(b, l); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("not JSON: %v (at byte %d)", se, se.Offset)
		}
		return fmt.Errorf("not an event: %v", err)
	}
	return nil
}

// event checks l and makes it an event.
func (l *line) event() (Event, error) {
	if l.Time == "" {
		return Event{}, errors.New(`no "time"`)
	}
	t, err := time.Parse(time.RFC3339Nano, l.Time)
	if err != nil {
		return Event{}, fmt.Errorf("time %q: want RFC 3339, such as 2026-11-28T22:00:00.000001Z", l.Time)
	}
	ev := Event{Time: t.Truncate(time.Microsecond), Key: l.Key, Status: l.Status, Cost: 1}
	switch {
	case l.Key == "" && l.Path == nil:
		return Event{}, errors.New(`no "key" or "path"`)
	case l.Key != "" && l.Path != nil:
		return Event{}, errors.New(`both "key" and "path": want one`)
	case l.Path != nil:
		if len(l.Path) == 0 {
			return Event{}, errors.New(`"path" is empty`)
		}
		if i := slices.Index(l.Path, ""); i >= 0 {
			return Event{}, fmt.Errorf(`"path" key %d is empty`, i)
		}
		ev.Path = l.Path
	}
	if l.Cost != nil {
		if c := *l.Cost; c < 1 || c > maxCost {
			return Event{}, fmt.Errorf("cost %d: want 1 to 2^40", c)
		}
		ev.Cost = int(*l.Cost)
	}
	if l.Status != 0 && (l.Status < 100 || l.Status > 599) {
		return Event{}, fmt.Errorf("status %d: want 100 to 599, or none", l.Status)
	}
	if l.Allowed != nil {
		ev.Outcome = Denied
		if *l.Allowed {
			ev.Outcome = Admitted
		}
	}
	return ev, nil
}

// parseFast reads a line in the form AppendLine writes, its strings
// without escapes, fields in its order: the usual line, read about five
// times faster than by encoding/json, into what encoding/json would
// read. It reports false for any other line, which decodeLine reads.
func parseFast(b []byte) (line, bool) {
	var l line
	var ok bool
	if b, ok = cutPrefix(b, `{"time":`); !ok {
		return l, false
	}
	if l.Time, b, ok = plainString(b); !ok {
		return l, false
	}
	if rest, ok := cutPrefix(b, `,"key":`); ok {
		if l.Key, b, ok = plainString(rest); !ok {
			return l, false
		}
	} else if rest, ok := cutPrefix(b, `,"path":[`); ok {
		b = rest
		l.Path = []string{}
		for len(b) > 0 && b[0] != ']' {
			if len(l.Path) > 0 {
				if b, ok = cutPrefix(b, ","); !ok {
					return l, false
				}
			}
			var k string
			if k, b, ok = plainString(b); !ok {
				return l, false
			}
			l.Path = append(l.Path, k)
		}
		if b, ok = cutPrefix(b, "]"); !ok {
			return l, false
		}
	} else {
		return l, false
	}
	if rest, ok := cutPrefix(b, `,"cost":`); ok {
		var c int64
		if c, b, ok = plainInt(rest); !ok {
			return l, false
		}
		l.Cost = &c
	}
	if rest, ok := cutPrefix(b, `,"status":`); ok {
		var st int64
		if st, b, ok = plainInt(rest); !ok || st == 0 {
			return l, false // 0 is what omitempty leaves out: let encoding/json say what it means
		}
		l.Status = int(st)
	}
	if rest, ok := cutPrefix(b, `,"allowed":true`); ok {
		yes := true
		l.Allowed, b = &yes, rest
	} else if rest, ok := cutPrefix(b, `,"allowed":false`); ok {
		no := false
		l.Allowed, b = &no, rest
	}
	if string(b) != "}" {
		return l, false
	}
	return l, true
}

// cutPrefix is bytes.CutPrefix for a string prefix.
func cutPrefix(b []byte, p string) ([]byte, bool) {
	if len(b) < len(p) || string(b[:len(p)]) != p {
		return b, false
	}
	return b[len(p):], true
}

// plainString reads a JSON string without escapes or bytes outside
// printable ASCII at the start of b.
func plainString(b []byte) (string, []byte, bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", b, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return string(b[1:i]), b[i+1:], true
		case c < 0x20 || c == '\\' || c >= 0x7f:
			return "", b, false
		}
	}
	return "", b, false
}

// plainInt reads a JSON integer of at most 15 digits, without sign, at
// the start of b (a negative or longer one is left to encoding/json).
func plainInt(b []byte) (int64, []byte, bool) {
	n, i := int64(0), 0
	for ; i < len(b) && i < 16 && b[i] >= '0' && b[i] <= '9'; i++ {
		n = n*10 + int64(b[i]-'0')
	}
	if i == 0 || i > 15 || (i > 1 && b[0] == '0') || i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E' || b[i] >= '0' && b[i] <= '9') {
		return 0, b, false
	}
	return n, b[i:], true
}

// AppendLine appends ev as one line of the log format, newline included,
// to b: the line [ParseLine] reads back as ev (its time in UTC, to the
// microsecond).
func AppendLine(b []byte, ev Event) []byte {
	b = append(b, `{"time":"`...)
	b = ev.Time.UTC().AppendFormat(b, timeLayout)
	b = append(b, '"')
	if ev.Path != nil {
		b = append(b, `,"path":[`...)
		for i, k := range ev.Path {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
		}
		b = append(b, ']')
	} else {
		b = append(b, `,"key":`...)
		b = appendString(b, ev.Key)
	}
	if ev.Cost != 1 {
		b = append(b, `,"cost":`...)
		b = strconv.AppendInt(b, int64(ev.Cost), 10)
	}
	if ev.Status != 0 {
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(ev.Status), 10)
	}
	switch ev.Outcome {
	case Admitted:
		b = append(b, `,"allowed":true`...)
	case Denied:
		b = append(b, `,"allowed":false`...)
	}
	return append(b, "}\n"...)
}

// appendString appends s as a JSON string, as encoding/json writes it
// (invalid UTF-8 becomes U+FFFD).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// BadLine is a line [Read] skipped, and why.
type BadLine struct {
	Line int // 1-based
	Err  error
}

// Error says which line is bad and why.
func (e BadLine) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Read reads every event of a log in the log format from r, in the
// order of its lines. Blank lines and lines starting with # are skipped;
// a bad line (see [ParseLine], or one longer than [MaxLine]) is passed
// to bad, if it is not nil, and skipped. Read returns an error only when
// r fails.
func Read(r io.Reader, bad func(BadLine)) ([]Event, error) {
	var events []Event
	err := scanLines(r, func(n int, b []byte, tooLong bool) {
		report := func(err error) {
			if bad != nil {
				bad(BadLine{Line: n, Err: err})
			}
		}
		if tooLong {
			report(fmt.Errorf("longer than %d bytes", MaxLine))
			return
		}
		b = bytes.TrimSpace(b)
		if len(b) == 0 || b[0] == '#' {
			return
		}
		ev, err := ParseLine(b)
		if err != nil {
			report(err)
			return
		}
		events = append(events, ev)
	})
	return events, err
}

// scanLines calls f with each line of r, numbered from 1, without its
// newline; a line longer than MaxLine is passed as tooLong, without its
// bytes.
func scanLines(r io.Reader, f func(n int, b []byte, tooLong bool)) error {
	br := bufio.NewReaderSize(r, MaxLine+1)
	for n := 1; ; n++ {
		b, err := br.ReadSlice('\n')
		tooLong := false
		for errors.Is(err, bufio.ErrBufferFull) { // skip the rest of a long line
			tooLong = true
			_, err = br.ReadSlice('\n')
		}
		if len(b) > 0 || tooLong {
			f(n, bytes.TrimSuffix(b, []byte{'\n'}), tooLong)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
