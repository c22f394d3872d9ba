package core_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want core.Limit
		err  string // a part of the error; "" for none
	}{
		{in: "600/m", want: core.PerMinute(600)},
		{in: "100/s burst 20", want: core.PerSecond(100).WithBurst(20)},
		{in: "100/S, Burst 20", want: core.PerSecond(100).WithBurst(20)},
		{in: "  5/15m   name login ", want: core.Limit{Name: "login", Rate: 5, Period: 15 * time.Minute, Burst: 5}},
		{in: `5/15m name "login page" burst 2`, want: core.Limit{Name: "login page", Rate: 5, Period: 15 * time.Minute, Burst: 2}},
		{in: "1000/d", want: core.Limit{Rate: 1000, Period: 24 * time.Hour, Burst: 1000}},
		{in: "3/2d", want: core.Limit{Rate: 3, Period: 48 * time.Hour, Burst: 3}},
		{in: "7/1.5s burst 4", want: core.Limit{Rate: 7, Period: 1500 * time.Millisecond, Burst: 4}},
		{in: "10/minute", want: core.PerMinute(10)},
		{in: "10/hours", want: core.PerHour(10)},
		{in: "10/1h30m", want: core.Limit{Rate: 10, Period: 90 * time.Minute, Burst: 10}},
		{in: "1000/d", want: core.PerDay(1000)},
		{in: "1000-H", want: core.PerHour(1000)},
		{in: "5-S", want: core.PerSecond(5)},
		{in: "5-s", want: core.PerSecond(5)},
		{in: "60-M", want: core.PerMinute(60)},
		{in: "60-m burst 10", want: core.PerMinute(60).WithBurst(10)},
		{in: "100000-D, name daily", want: core.PerDay(100000).WithName("daily")},
		{in: "10-M refill interval", want: core.PerInterval(10, time.Minute)},
		{in: "", err: "empty"},
		{in: "600", err: `"600" has no '/'`},
		{in: "1000-W", err: `"1000-W" has no '/'; want <rate>/<period>, such as 600/m, or <rate>-<S|M|H|D>`},
		{in: "1000-", err: `"1000-" has no '/'`},
		{in: "-H", err: `"-H" has no '/'`},
		{in: "1000-HH", err: `"1000-HH" has no '/'`},
		{in: "0-H", err: `rate "0"`},
		{in: "-5-H", err: `rate "-5"`},
		{in: "x-H", err: `rate "x"`},
		{in: "1000-H burst", err: `"burst" needs a value`},
		{in: "x/m", err: `rate "x"`},
		{in: "0/m", err: `rate "0"`},
		{in: "5/fortnight", err: `period "fortnight"`},
		{in: "5/-1s", err: `period "-1s"`},
		{in: "5/m burst", err: `"burst" needs a value`},
		{in: "5/m burst -2", err: `burst "-2"`},
		{in: "5/m per ip", err: `unknown word "per"`},
		{in: `5/m name "open`, err: "no closing quote"},
		{in: "5/1ns", err: "Period must be at least 1µs"},
		{in: "10/m burst 50 refill interval", want: core.PerInterval(10, time.Minute).WithBurst(50)},
		{in: "10/m, refill Interval", want: core.PerInterval(10, time.Minute)},
		{in: "10/m refill continuous", want: core.PerMinute(10)},
		{in: "1000/calendar-day zone America/New_York", want: core.PerCalendarDay(1000, "America/New_York")},
		{in: "1000/Calendar-Day in America/New_York name daily", want: core.PerCalendarDay(1000, "America/New_York").WithName("daily")},
		{in: "5000/calendar-week", want: core.PerCalendarWeek(5000, "")},
		{in: `20000/calendar-month zone "Europe/Paris"`, want: core.PerCalendarMonth(20000, "Europe/Paris")},
		{in: "10/m refill hourly", err: `refill "hourly"`},
		{in: "10/calendar-day refill interval", err: "with a calendar period"},
		{in: "10/calendar-day burst 5", err: "Burst must equal Rate"},
		{in: "10/calendar-day zone Nowhere/Land", err: `Zone "Nowhere/Land"`},
		{in: "10/m zone UTC", err: "needs a calendar Refill"},
		{in: "10/calendar-fortnight", err: `period "calendar-fortnight"`},
	} {
		got, err := core.ParseLimit(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("ParseLimit(%q): %v", tc.in, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("ParseLimit(%q) = %v, want %v", tc.in, got, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, core.ErrInvalidLimit)):
			t.Errorf("ParseLimit(%q) = %v, %v; want an ErrInvalidLimit saying %q", tc.in, got, err, tc.err)
		case tc.err != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.in)):
			t.Errorf("ParseLimit(%q): %v does not quote the text", tc.in, err)
		}
	}
}

// roundTrips are limits that must come back equal from every encoding.
var roundTrips = []core.Limit{
	core.PerSecond(5),
	core.PerMinute(600).WithBurst(50).WithName("api"),
	core.PerHour(100).WithName("login page"),
	{Rate: 7, Period: 1500 * time.Millisecond, Burst: 4},
	{Rate: 3, Period: 7 * time.Second, Burst: 1},
	{Rate: 1, Period: 90 * time.Minute, Burst: 1, Name: `a "quoted", name`},
	{Rate: 1000, Period: 48 * time.Hour, Burst: 10},
	{Rate: 9, Period: 1234567 * time.Microsecond, Burst: 9},
	core.PerInterval(10, time.Minute).WithBurst(50),
	core.PerInterval(3, 1500*time.Millisecond).WithName("slow"),
	core.PerCalendarDay(1000, "America/New_York"),
	core.PerCalendarWeek(5000, "").WithName("weekly"),
	core.PerCalendarMonth(20000, "Europe/Paris"),
	core.PerCalendarDay(7, "America/Argentina/Buenos_Aires"),
}

func TestLimitTextRoundTrip(t *testing.T) {
	for _, l := range roundTrips {
		text, err := l.MarshalText()
		if err != nil {
			t.Fatalf("MarshalText(%v): %v", l, err)
		}
		back, err := core.ParseLimit(string(text))
		if err != nil || back != l {
			t.Errorf("%v wrote %q, read back as %v, %v", l, text, back, err)
		}
	}
	if got, _ := core.PerMinute(600).MarshalText(); string(got) != "600/m" {
		t.Errorf("PerMinute(600) writes %q, want 600/m", got)
	}
	if _, err := (core.Limit{Rate: 1}).MarshalText(); !errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("MarshalText of an invalid limit: %v, want ErrInvalidLimit", err)
	}
}

// config is a service configuration as users write it.
type config struct {
	Default core.Limit            `json:"default"`
	Routes  map[string]core.Limit `json:"routes"`
}

func TestLimitJSONStepped(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want core.Limit
	}{
		{`{"rate": 1000, "refill": "daily", "zone": "America/New_York"}`, core.PerCalendarDay(1000, "America/New_York")},
		{`{"rate": 10, "period": "1m", "burst": 50, "refill": "interval"}`, core.PerInterval(10, time.Minute).WithBurst(50)},
		{`{"rate": 9, "refill": "monthly", "name": "m"}`, core.PerCalendarMonth(9, "").WithName("m")},
		{`"1000/calendar-week zone Asia/Tokyo"`, core.PerCalendarWeek(1000, "Asia/Tokyo")},
	} {
		var got core.Limit
		if err := json.Unmarshal([]byte(tc.in), &got); err != nil || got != tc.want {
			t.Errorf("json %s = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	b, err := json.Marshal(core.PerCalendarDay(1000, "America/New_York"))
	if err != nil || string(b) != `"1000/calendar-day zone America/New_York"` {
		t.Errorf("json.Marshal(PerCalendarDay) = %s, %v", b, err)
	}
}

func TestLimitJSON(t *testing.T) {
	var c config
	in := `{"default": "600/m", "routes": {
		"/login": {"rate": 5, "period": "15m", "name": "login"},
		"/search": {"rate": 10, "period": 1000000000, "burst": 3}}}`
	if err := json.Unmarshal([]byte(in), &c); err != nil {
		t.Fatal(err)
	}
	want := config{Default: core.PerMinute(600), Routes: map[string]core.Limit{
		"/login":  {Name: "login", Rate: 5, Period: 15 * time.Minute, Burst: 5},
		"/search": core.PerSecond(10).WithBurst(3),
	}}
	if fmt.Sprint(c) != fmt.Sprint(want) {
		t.Fatalf("decoded %v, want %v", c, want)
	}
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"default":"600/m"`) {
		t.Errorf("encoded %s, want the limits as text", out)
	}
	var back config
	if err := json.Unmarshal(out, &back); err != nil || fmt.Sprint(back) != fmt.Sprint(want) {
		t.Errorf("round trip through %s: %v, %v", out, back, err)
	}
	for _, l := range roundTrips {
		b, _ := json.Marshal(l)
		var got core.Limit
		if err := json.Unmarshal(b, &got); err != nil || got != l {
			t.Errorf("%v through JSON %s: %v, %v", l, b, got, err)
		}
	}
	for _, tc := range []struct{ in, err string }{
		{`"600/fortnight"`, `period "fortnight"`},
		{`{"rate": 5, "period": "1m", "brust": 2}`, `unknown field "brust"`},
		{`{"rate": 5}`, "no period"},
		{`{"rate": 5, "period": true}`, "neither a duration string nor nanoseconds"},
		{`{"rate": 0, "period": "1m"}`, "Rate must be at least 1"},
		{`{"rate": 5, "refill": "daily", "zone": "Mars/Base"}`, `Zone "Mars/Base"`},
		{`{"rate": 5, "refill": "interval"}`, "no period"},
		{`{"rate": 5, "period": "1h", "refill": "daily"}`, "Period must be zero"},
	} {
		var l core.Limit
		err := json.Unmarshal([]byte(tc.in), &l)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("json %s: %v, want an error saying %q", tc.in, err, tc.err)
		}
	}
}

// FuzzParseLimit: any text either fails with ErrInvalidLimit or gives a
// valid limit that writes and reads back equal.
func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"600/m", "100/s burst 20", `5/15m name "a b"`, "7/1.5s", "3/2d", "x/y z", "10/m burst 5 refill interval", "1000/calendar-day zone America/New_York", "3/calendar-month in UTC", "1000-H", "5-s burst 2", "-1-D", "7-X"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := core.ParseLimit(s)
		if err != nil {
			if !errors.Is(err, core.ErrInvalidLimit) {
				t.Fatalf("ParseLimit(%q): %v, not an ErrInvalidLimit", s, err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLimit(%q) = %v, invalid: %v", s, l, err)
		}
		text, err := l.MarshalText()
		if err != nil {
			t.Fatalf("MarshalText(%v): %v", l, err)
		}
		back, err := core.ParseLimit(string(text))
		if err != nil || back != l {
			t.Fatalf("%q read as %v, wrote %q, read back as %v, %v", s, l, text, back, err)
		}
	})
}

func TestMustParseLimit(t *testing.T) {
	if got, want := core.MustParseLimit("1000-H burst 50"), core.PerHour(1000).WithBurst(50); got != want {
		t.Errorf("MustParseLimit(1000-H burst 50) = %v, want %v", got, want)
	}
	for _, in := range []string{"", "600", "5/1ns", "10/calendar-day burst 5"} {
		func() {
			defer func() {
				r := recover()
				err, ok := r.(error)
				if !ok {
					t.Errorf("MustParseLimit(%q) panicked with %#v, want an error", in, r)
					return
				}
				if !strings.HasPrefix(err.Error(), "core: ") || !errors.Is(err, core.ErrInvalidLimit) || !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
					t.Errorf("MustParseLimit(%q) panicked with %q, want a core: error quoting the text and wrapping ErrInvalidLimit", in, err)
				}
			}()
			l := core.MustParseLimit(in)
			t.Errorf("MustParseLimit(%q) = %v, want a panic", in, l)
		}()
	}
}

func TestPerDay(t *testing.T) {
	want := core.Limit{Rate: 500, Period: 24 * time.Hour, Burst: 500}
	if got := core.PerDay(500); got != want {
		t.Errorf("PerDay(500) = %v, want %v", got, want)
	}
	if err := core.PerDay(500).Validate(); err != nil {
		t.Errorf("PerDay(500).Validate() = %v", err)
	}
	if text, err := core.PerDay(500).MarshalText(); err != nil || string(text) != "500/d" {
		t.Errorf("PerDay(500).MarshalText() = %q, %v, want 500/d", text, err)
	}
}

// Limits come from configuration as text.
func ExampleParseLimit() {
	l, err := core.ParseLimit("100/s burst 20")
	if err != nil {
		panic(err)
	}
	fmt.Println(l)
	text, _ := core.PerMinute(600).WithName("api").MarshalText()
	fmt.Println(string(text))
	// Output:
	// 100/1s burst 20
	// 600/m name api
}

// The form other Go rate limiters use, <rate>-<S|M|H|D>, reads the same
// limits: M is a minute, D 24 hours.
func ExampleParseLimit_hyphen() {
	for _, s := range []string{"1000-H", "20-s burst 5", "50000-D"} {
		l, err := core.ParseLimit(s)
		if err != nil {
			panic(err)
		}
		text, _ := l.MarshalText()
		fmt.Printf("%-13s %s\n", s, text)
	}
	// Output:
	// 1000-H        1000/h
	// 20-s burst 5  20/s burst 5
	// 50000-D       50000/d
}

// MustParseLimit suits limits fixed in the source, such as package-level
// variables: a typo stops the program at start.
func ExampleMustParseLimit() {
	login := core.MustParseLimit("5/15m name login")
	fmt.Println(login)

	defer func() { fmt.Println("panic:", recover()) }()
	core.MustParseLimit("5 per minute")
	// Output:
	// "login" 5/15m0s burst 5
	// panic: core: MustParseLimit: core: invalid limit: limit "5 per minute": "5" has no '/'; want <rate>/<period>, such as 600/m, or <rate>-<S|M|H|D>, such as 1000-H
}

// A rolling day: tokens come back continuously, 1000 over 24 hours,
// unlike PerCalendarDay's quota, restored at midnight.
func ExamplePerDay() {
	fmt.Println(core.PerDay(1000))
	fmt.Println(core.PerCalendarDay(1000, "Europe/Paris"))
	// Output:
	// 1000/24h0m0s burst 1000
	// 1000/calendar-day zone Europe/Paris
}
