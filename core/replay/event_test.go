package replay_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/replay"
)

func TestParseLine(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 22, 0, 0, 1000, time.UTC)
	tests := []struct {
		name, line string
		want       replay.Event
		err        string // a part of the error; "" for none
	}{
		{"key", `{"time":"2026-11-28T22:00:00.000001Z","key":"tenant:acme"}`, replay.Event{Time: t0, Key: "tenant:acme", Cost: 1}, ""},
		{"all fields", `{"time":"2026-11-28T22:00:00.000001Z","key":"k","cost":3,"status":201,"allowed":true}`,
			replay.Event{Time: t0, Key: "k", Cost: 3, Status: 201, Outcome: replay.Admitted}, ""},
		{"denied", `{"time":"2026-11-28T22:00:00.000001Z","key":"k","allowed":false}`, replay.Event{Time: t0, Key: "k", Cost: 1, Outcome: replay.Denied}, ""},
		{"path", `{"time":"2026-11-28T22:00:00.000001Z","path":["acme","alice"]}`, replay.Event{Time: t0, Path: []string{"acme", "alice"}, Cost: 1}, ""},
		{"nanoseconds dropped", `{"time":"2026-11-28T22:00:00.000001999Z","key":"k"}`, replay.Event{Time: t0, Key: "k", Cost: 1}, ""},
		{"other zone", `{"time":"2026-11-28T23:00:00.000001+01:00","key":"k"}`, replay.Event{Time: t0, Key: "k", Cost: 1}, ""},
		{"unknown field ignored", `{"time":"2026-11-28T22:00:00.000001Z","key":"k","route":"/x"}`, replay.Event{Time: t0, Key: "k", Cost: 1}, ""},
		{"not JSON", `time=now key=k`, replay.Event{}, "not JSON"},
		{"truncated", `{"time":"2026-11-28T22:00:00Z","key":"k"`, replay.Event{}, "not JSON"},
		{"array", `[1,2]`, replay.Event{}, "not an event"},
		{"no time", `{"key":"k"}`, replay.Event{}, `no "time"`},
		{"bad time", `{"time":"yesterday","key":"k"}`, replay.Event{}, "RFC 3339"},
		{"time a number", `{"time":1764367200,"key":"k"}`, replay.Event{}, "not an event"},
		{"no key", `{"time":"2026-11-28T22:00:00Z"}`, replay.Event{}, `no "key" or "path"`},
		{"both", `{"time":"2026-11-28T22:00:00Z","key":"k","path":["a"]}`, replay.Event{}, "both"},
		{"empty path", `{"time":"2026-11-28T22:00:00Z","path":[]}`, replay.Event{}, "empty"},
		{"empty path key", `{"time":"2026-11-28T22:00:00Z","path":["a",""]}`, replay.Event{}, "key 1 is empty"},
		{"zero cost", `{"time":"2026-11-28T22:00:00Z","key":"k","cost":0}`, replay.Event{}, "cost 0"},
		{"negative cost", `{"time":"2026-11-28T22:00:00Z","key":"k","cost":-2}`, replay.Event{}, "cost -2"},
		{"huge cost", `{"time":"2026-11-28T22:00:00Z","key":"k","cost":1e300}`, replay.Event{}, "not an event"},
		{"fractional cost", `{"time":"2026-11-28T22:00:00Z","key":"k","cost":1.5}`, replay.Event{}, "not an event"},
		{"bad status", `{"time":"2026-11-28T22:00:00Z","key":"k","status":42}`, replay.Event{}, "status 42"},
		{"allowed a string", `{"time":"2026-11-28T22:00:00Z","key":"k","allowed":"yes"}`, replay.Event{}, "not an event"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := replay.ParseLine([]byte(tt.line))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseLine(%s) = %+v, %v; want an error with %q", tt.line, got, err, tt.err)
				}
				return
			}
			if err != nil || !got.Time.Equal(tt.want.Time) {
				t.Fatalf("ParseLine(%s) = %+v, %v; want %+v", tt.line, got, err, tt.want)
			}
			got.Time = tt.want.Time
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseLine(%s) = %+v, want %+v", tt.line, got, tt.want)
			}
		})
	}
}

// TestReadBadLines reads a log of good, bad, blank and comment lines, one
// longer than MaxLine among them: every bad line is reported with its
// number, and the good ones are read around them.
func TestReadBadLines(t *testing.T) {
	long := `{"time":"2026-11-28T22:00:00Z","key":"` + strings.Repeat("x", replay.MaxLine) + `"}`
	log := strings.Join([]string{
		`{"time":"2026-11-28T22:00:00Z","key":"a"}`, // 1
		``,                                // 2
		`# a comment`,                     // 3
		`{"time":"2026-11-28T22:00:01Z"}`, // 4: no key
		long,                              // 5
		`not json at all`,                 // 6
		`{"time":"2026-11-28T22:00:02Z","key":"b","cost":2}`, // 7
		"\x00\xff{", // 8
		`{"time":"2026-11-28T22:00:03Z","path":["c","d"]}`, // 9, without a newline
	}, "\n")
	var bad []int
	events, err := replay.Read(strings.NewReader(log), func(b replay.BadLine) {
		bad = append(bad, b.Line)
		if !strings.HasPrefix(b.Error(), "line ") {
			t.Errorf("BadLine.Error() = %q, want it to start with the line", b.Error())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{4, 5, 6, 8}; !reflect.DeepEqual(bad, want) {
		t.Fatalf("bad lines %v, want %v", bad, want)
	}
	var keys []string
	for _, ev := range events {
		keys = append(keys, ev.Key+strings.Join(ev.Path, "/"))
	}
	if want := []string{"a", "b", "c/d"}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("events %v, want %v", keys, want)
	}
}

// TestReadFailingReader checks that a reader's error is Read's error.
func TestReadFailingReader(t *testing.T) {
	boom := errors.New("boom")
	_, err := replay.Read(&failing{data: `{"time":"2026-11-28T22:00:00Z","key":"a"}` + "\n", err: boom}, nil)
	if !errors.Is(err, boom) {
		t.Fatalf("Read = %v, want %v", err, boom)
	}
}

type failing struct {
	data string
	err  error
}

func (f *failing) Read(p []byte) (int, error) {
	if f.data == "" {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

// TestAppendLineRoundTrip writes events and reads them back.
func TestAppendLineRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 22, 0, 0, 123456000, time.FixedZone("x", 3600))
	events := []replay.Event{
		{Time: t0, Key: "tenant:acme", Cost: 1},
		{Time: t0, Key: "quote\"back\\slash\x01\u00e9\xff", Cost: 7, Status: 503, Outcome: replay.Denied},
		{Time: t0, Path: []string{"org", "user"}, Cost: 2, Status: 200, Outcome: replay.Admitted},
	}
	for _, ev := range events {
		line := replay.AppendLine(nil, ev)
		if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("AppendLine(%+v) = %q, want one line", ev, line)
		}
		got, err := replay.ParseLine(line)
		if err != nil {
			t.Fatalf("ParseLine(%q): %v", line, err)
		}
		want := ev
		want.Key = strings.ToValidUTF8(want.Key, "\ufffd")
		if !got.Time.Equal(want.Time) {
			t.Fatalf("time %v, want %v", got.Time, want.Time)
		}
		got.Time = want.Time
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ParseLine(AppendLine(%+v)) = %+v", want, got)
		}
	}
}

// FuzzParseLine checks that any line is either refused with an error or
// read into an event that AppendLine writes back as the same event.
func FuzzParseLine(f *testing.F) {
	f.Add([]byte(`{"time":"2026-11-28T22:00:00.000001Z","key":"tenant:acme","cost":3,"status":200,"allowed":true}`))
	f.Add([]byte(`{"time":"2026-11-28T22:00:00Z","path":["a","b"],"allowed":false}`))
	f.Add([]byte(`{"time":"2026-11-28T22:00:00Z","key":"k","cost":-1}`))
	f.Add([]byte(`{"time":"x"}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := replay.ParseLine(line)
		if err != nil {
			return
		}
		if ev.Cost < 1 || (ev.Key == "") == (ev.Path == nil) || ev.Status != 0 && (ev.Status < 100 || ev.Status > 599) {
			t.Fatalf("ParseLine(%q) = %+v: an event it should have refused", line, ev)
		}
		again, err := replay.ParseLine(replay.AppendLine(nil, ev))
		if err != nil {
			t.Fatalf("ParseLine(AppendLine(%+v)): %v", ev, err)
		}
		if !again.Time.Equal(ev.Time) || again.Key != ev.Key || again.Cost != ev.Cost || again.Status != ev.Status ||
			again.Outcome != ev.Outcome || !reflect.DeepEqual(again.Path, ev.Path) {
			t.Fatalf("round trip of %q: %+v, then %+v", line, ev, again)
		}
	})
}
