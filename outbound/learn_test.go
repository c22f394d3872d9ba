package outbound

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// t0 is the instant the table's responses are read at.
var t0 = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

// TestReadAdvice reads what well-formed responses say.
func TestReadAdvice(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		fields []string // name, value, ...
		want   advice
	}{
		{"429 Retry-After seconds", 429, []string{"Retry-After", "30"}, advice{pause: 30 * time.Second}},
		{"503 Retry-After date", 503, []string{"Retry-After", t0.Add(90 * time.Second).Format(http.TimeFormat)}, advice{pause: 90 * time.Second}},
		{"200 Retry-After ignored", 200, []string{"Retry-After", "30"}, advice{}},
		{"RateLimit r=0", 200, []string{"RateLimit", `"api";r=0;t=12`}, advice{pause: 12 * time.Second}},
		{"RateLimit r>0", 200, []string{"RateLimit", `"api";r=3;t=12`}, advice{}},
		{"X-RateLimit reset delta", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "7"}, advice{pause: 7 * time.Second}},
		{"X-RateLimit reset unix", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1798761660"}, advice{pause: time.Unix(1798761660, 0).Sub(t0)}},
		{"X-RateLimit-Limit", 200, []string{"X-RateLimit-Limit", "50"}, advice{burst: 50}},
		{"policy", 200, []string{"RateLimit-Policy", `"api";q=100;w=60`}, advice{policy: core.Limit{Rate: 98, Period: time.Minute, Burst: 2}}},
		{"policy, lowest of two", 200, []string{"RateLimit-Policy", `"burst";q=10;w=1, "day";q=1000;w=86400`}, advice{policy: core.Limit{Rate: 1000 - 20, Period: 24 * time.Hour, Burst: 20}}},
		{"policy of one a window", 200, []string{"RateLimit-Policy", `"slow";q=1;w=10`}, advice{policy: core.Limit{Rate: 1, Period: 20 * time.Second, Burst: 1}}},
		{"policy, quoted comma", 200, []string{"RateLimit-Policy", `"a,b;c";q=10;w=1`}, advice{policy: core.Limit{Rate: 9, Period: time.Second, Burst: 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := readAdvice(c.status, header(c.fields...), t0, time.Hour, nil); got != c.want {
				t.Errorf("readAdvice = %+v, want %+v", got, c.want)
			}
		})
	}
}

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// TestHostileFields is done-when 4: bad or hostile fields never raise the
// configured limit, never pause longer than the bound, and never panic;
// each case goes through Budget.Learn on a live budget.
func TestHostileFields(t *testing.T) {
	configured := core.Limit{Rate: 100, Period: time.Minute, Burst: 100}
	huge := strings.Repeat("9", 40)
	for _, c := range []struct {
		name      string
		status    int
		fields    []string
		wantPause time.Duration
	}{
		{"negative Retry-After", 429, []string{"Retry-After", "-30"}, 0},
		{"huge Retry-After", 429, []string{"Retry-After", huge}, time.Hour},
		{"Retry-After beyond int64", 503, []string{"Retry-After", "9223372036854775807"}, time.Hour},
		{"garbage Retry-After", 429, []string{"Retry-After", "soon, maybe"}, 0},
		{"Retry-After date in the past", 429, []string{"Retry-After", t0.Add(-time.Hour).Format(http.TimeFormat)}, 0},
		{"fractional Retry-After", 429, []string{"Retry-After", "1.5"}, 0},
		{"policy far above", 200, []string{"RateLimit-Policy", `"x";q=1000000000;w=1`}, 0},
		{"policy above int32", 200, []string{"RateLimit-Policy", `"x";q=99999999999;w=1`}, 0},
		{"policy negative", 200, []string{"RateLimit-Policy", `"x";q=-5;w=60`}, 0},
		{"policy zero quota", 200, []string{"RateLimit-Policy", `"x";q=0;w=60`}, 0},
		{"policy zero window", 200, []string{"RateLimit-Policy", `"x";q=10;w=0`}, 0},
		{"policy huge window", 200, []string{"RateLimit-Policy", `"x";q=10;w=` + huge}, 0},
		{"policy of bytes", 200, []string{"RateLimit-Policy", `"x";q=1;w=60;qu="content-bytes"`}, 0},
		{"policy garbage", 200, []string{"RateLimit-Policy", `;;;===,,,"`}, 0},
		{"policy unterminated string", 200, []string{"RateLimit-Policy", `"x;q=1;w=1`}, 0},
		{"policy duplicate q", 200, []string{"RateLimit-Policy", `"x";q=1000;q=1;w=60`}, 0},
		{"RateLimit negative t", 200, []string{"RateLimit", `"x";r=0;t=-5`}, 0},
		{"RateLimit huge t", 200, []string{"RateLimit", `"x";r=0;t=` + huge}, time.Hour},
		{"RateLimit t beyond int64", 200, []string{"RateLimit", `"x";r=0;t=9223372036854775807`}, time.Hour},
		{"RateLimit negative r", 200, []string{"RateLimit", `"x";r=-1;t=5`}, 0},
		{"X-RateLimit-Limit huge", 200, []string{"X-RateLimit-Limit", huge}, 0},
		{"X-RateLimit-Limit negative", 200, []string{"X-RateLimit-Limit", "-1"}, 0},
		{"X-RateLimit-Limit zero", 200, []string{"X-RateLimit-Limit", "0"}, 0},
		{"X-RateLimit-Limit above", 200, []string{"X-RateLimit-Limit", "1000000"}, 0},
		{"X-RateLimit-Reset far future", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "99999999999"}, time.Hour},
		{"X-RateLimit-Reset negative", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "-3"}, 0},
		{"X-RateLimit-Reset in the past", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1000000001"}, 0},
		{"field too long", 200, []string{"RateLimit-Policy", `"x";q=1;w=1,` + strings.Repeat(" ", maxField)}, 0},
		{"many items", 200, []string{"RateLimit-Policy", strings.Repeat(`"x";q=1000;w=1,`, 10000)}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := readAdvice(c.status, header(c.fields...), t0, time.Hour, nil)
			if got.pause != c.wantPause {
				t.Errorf("pause %v, want %v", got.pause, c.wantPause)
			}
			lim, err := core.NewMemory()
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(lim, configured)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			if _, err := b.Learn(context.Background(), "k", c.status, header(c.fields...)); err != nil {
				t.Fatal(err)
			}
			if l := b.Limit("k"); slower(configured, l) || l.Burst > configured.Burst {
				t.Errorf("limit %v after learning, above the configured %v", l, configured)
			}
			if o, ok := b.shared.Lookup("k"); ok {
				for _, l := range o.Limits {
					if slower(configured, l) || l.Burst > configured.Burst {
						t.Errorf("limit %v shared with the fleet, above the configured %v", l, configured)
					}
				}
			}
		})
	}
}

// FuzzReadAdvice reads responses with arbitrary fields: never a panic, a
// pause within the bound, and a learned limit never above the
// configured one, whatever the upstream sends.
func FuzzReadAdvice(f *testing.F) {
	f.Add(429, "30", `"a";r=0;t=5`, `"a";q=100;w=60`, "100", "0", "7")
	f.Add(503, "Wed, 21 Oct 2026 07:28:00 GMT", `"a";r=-1`, `"a,b";q=1;w=1, "c";q=5`, "-1", "x", "1798761660")
	f.Add(200, "", `,,;`, `"unterminated;q=1`, "", "", "")
	configured := core.Limit{Rate: 100, Period: time.Minute, Burst: 100}
	lim, err := core.NewMemory()
	if err != nil {
		f.Fatal(err)
	}
	b, err := New(lim, configured)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = b.Close() })
	f.Fuzz(func(t *testing.T, status int, retry, rl, pol, xlimit, xrem, xreset string) {
		h := header("Retry-After", retry, "RateLimit", rl, "RateLimit-Policy", pol,
			"X-RateLimit-Limit", xlimit, "X-RateLimit-Remaining", xrem, "X-RateLimit-Reset", xreset)
		a := readAdvice(status, h, t0, time.Hour, nil)
		if a.pause < 0 || a.pause > time.Hour {
			t.Fatalf("pause %v, outside [0, 1h]", a.pause)
		}
		if a.policy != (core.Limit{}) {
			if _, err := lim.Prepare(a.policy); err != nil {
				t.Fatalf("policy %+v is not a valid limit: %v", a.policy, err)
			}
		}
		if a.burst < 0 {
			t.Fatalf("burst %d", a.burst)
		}
		// Learn on a key of its own (its pause is written to memory).
		key := "k" + retry + rl + pol
		if _, err := b.Learn(context.Background(), key, status, h); err != nil {
			t.Fatal(err)
		}
		if l := b.Limit(key); slower(configured, l) || l.Burst > configured.Burst {
			t.Fatalf("limit %v after learning, above the configured %v", l, configured)
		}
	})
}
