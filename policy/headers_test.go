package policy

import (
	"context"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// steppedClock is a clock for a memory limiter that moves only when told.
type steppedClock struct{ ns atomic.Int64 }

var t0 = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *steppedClock) now() time.Time          { return t0.Add(time.Duration(c.ns.Load())) }
func (c *steppedClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newClockedPolicy(t *testing.T, limit core.Limit, opts ...opt) (*Policy, *steppedClock) {
	t.Helper()
	clk := &steppedClock{}
	lim, err := core.NewMemory(core.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := New(lim, limit, keyfunc.Static("k"), self, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p, clk
}

// TestHeadersSeveralLimits checks every field, step by step, for 10/s and
// 1000/h on one key: each describes the limit that decided, with its own
// numbers.
func TestHeadersSeveralLimits(t *testing.T) {
	sec := core.PerSecond(10).WithName("sec")
	hour := core.PerHour(1000).WithName("hour")
	p, clk := newClockedPolicy(t, sec, WithLimits[req, struct{}](hour), WithHeaders[req, struct{}](HeadersBoth))
	both := `"sec";q=10;w=1, "hour";q=1000;w=3600`
	fieldsOf := func(limit, remaining, reset, item string) map[string]string {
		return map[string]string{
			"X-RateLimit-Limit": limit, "X-RateLimit-Remaining": remaining, "X-RateLimit-Reset": reset,
			"RateLimit-Policy": both, "RateLimit": item,
		}
	}
	type step struct {
		after time.Duration // the clock moves by this much first
		n     int           // requests sent at that instant; the last one is checked
		want  map[string]string
	}
	steps := []step{
		// The example: 9 left under the 10/s limit, whose 10th
		// is there again in 0.1 s (not the 3.6 s of the hourly bucket).
		{0, 1, fieldsOf("10", "9", "1", `"sec";r=9;t=1`)},
		{0, 9, fieldsOf("10", "0", "1", `"sec";r=0;t=1`)},
		{0, 1, with(fieldsOf("10", "0", "1", `"sec";r=0;t=1`), "Retry-After", "1")},
		// 95 seconds at 10/s more: 960 in all within 96 s, of which the
		// hourly bucket has refilled 26.67; 66 left there. The
		// per-second limit still has fewer.
		{time.Second, 10, fieldsOf("10", "0", "1", `"sec";r=0;t=1`)},
	}
	for range 94 {
		steps = append(steps, step{time.Second, 10, nil})
	}
	steps = append(steps,
		// At 95 s the hourly bucket holds 66.4: 960 taken, 26.4
		// refilled. After a quiet 10 s the per-second bucket is full
		// again; one request leaves it 9 and the hourly one 68.2: the
		// per-second limit, with fewer left, still decides.
		step{10 * time.Second, 1, fieldsOf("10", "9", "1", `"sec";r=9;t=1`)},
		step{0, 9, fieldsOf("10", "0", "1", `"sec";r=0;t=1`)},
	)
	for range 6 {
		steps = append(steps, step{time.Second, 10, nil})
	}
	steps = append(steps,
		// At 112 s the hourly bucket has room for one request, with 0.4 s
		// of refill to spare: it is left with fewer than the per-second
		// one and decides; its next request is 3.2 s away, and it is full
		// again in 3599.6 s.
		step{time.Second, 1, fieldsOf("1000", "0", "3600", `"hour";r=0;t=4`)},
		// The next request is denied by it, 3.2 s short: the window ends
		// with Retry-After.
		step{0, 1, with(fieldsOf("1000", "0", "3600", `"hour";r=0;t=4`), "Retry-After", "4")},
	)
	for i, st := range steps {
		clk.advance(st.after)
		var v Verdict
		for range st.n {
			v = p.Decide(context.Background(), fakeReq{})
		}
		if st.want == nil {
			continue
		}
		if got := headersOf(v); !maps.Equal(got, st.want) {
			t.Fatalf("step %d: headers\n%v, want\n%v", i, got, st.want)
		}
	}
}

func with(m map[string]string, kv ...string) map[string]string {
	m = maps.Clone(m)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// TestPolicyItem checks each limit's RateLimit-Policy item: q is the
// Burst and w the seconds the bucket takes to refill it, rounded up.
func TestPolicyItem(t *testing.T) {
	tests := []struct {
		limit core.Limit
		want  string
	}{
		{core.PerMinute(600), `"600/m";q=600;w=60`},
		{core.PerMinute(600).WithName("api"), `"api";q=600;w=60`},
		{core.PerSecond(100).WithBurst(20), `"100/s burst 20";q=20;w=1`},                               // 0.2 s, rounded up
		{core.PerMinute(100).WithBurst(20), `"100/m burst 20";q=20;w=12`},                              // exact
		{core.PerSecond(10).WithBurst(50), `"10/s burst 50";q=50;w=5`},                                 // burst above the rate
		{core.Limit{Rate: 7, Period: 1500 * time.Millisecond, Burst: 4}, `"7/1500ms burst 4";q=4;w=1`}, // 0.857 s
		{core.PerHour(1).WithBurst(100), `"1/h burst 100";q=100;w=360000`},
		{core.Limit{Rate: 1, Period: 1500 * time.Millisecond, Burst: 1}, `"1/1500ms";q=1;w=2`},
		{core.Limit{Rate: 3, Period: 500 * time.Microsecond, Burst: 3}, `"3/500us";q=3;w=1`},
		{core.Limit{Name: `a "b" \c` + "\n", Rate: 1, Period: time.Second, Burst: 1}, `"a \"b\" \\c?";q=1;w=1`},
	}
	for _, tt := range tests {
		if got := policyItem(tt.limit, ""); got != tt.want {
			t.Errorf("policyItem(%v) = %s, want %s", tt.limit, got, tt.want)
		}
	}
}

// TestPolicyItemIsSafe checks the claim behind q and w: a client that never
// sends more than q requests in any w seconds is never denied, on random
// limits and random request patterns that keep to it.
func TestPolicyItemIsSafe(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		l := core.Limit{Rate: 1 + r.IntN(20), Period: time.Duration(1+r.IntN(3000)) * time.Millisecond, Burst: 1 + r.IntN(20)}
		q, w := int(l.Burst), time.Duration(refillSeconds(l))*time.Second
		clk := &steppedClock{}
		lim, err := core.NewMemory(core.WithClock(clk.now))
		if err != nil {
			t.Fatal(err)
		}
		var sent []time.Duration // when each admitted request was sent
		now := time.Duration(0)
		for range 300 {
			now += time.Duration(r.Int64N(int64(w) / 2))
			// Keep to q in any window of w: the q-th last request must
			// be at least w ago (a window [now-w, now] holds at most q).
			if len(sent) >= q && now-sent[len(sent)-q] < w {
				now = sent[len(sent)-q] + w
			}
			clk.ns.Store(int64(now))
			res, err := lim.Allow(context.Background(), "k", l)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Allowed {
				t.Fatalf("%v, described as q=%d;w=%s: request %d at %v denied", l, q, w, len(sent)+1, now)
			}
			sent = append(sent, now)
		}
	}
}

// TestEffectiveWindow checks t before rounding: until the limit has one
// more request than remaining to give, never short of it and at most a
// microsecond over, on random single-limit sequences against the memory
// limiter's own Peek.
func TestEffectiveWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	for range 100 {
		l := core.Limit{Rate: 1 + r.IntN(50), Period: time.Duration(1+r.IntN(5_000_000)) * time.Microsecond, Burst: 1 + r.IntN(10)}
		clk := &steppedClock{}
		lim, err := core.NewMemory(core.WithClock(clk.now))
		if err != nil {
			t.Fatal(err)
		}
		for range 50 {
			clk.advance(time.Duration(r.Int64N(int64(l.Period/time.Microsecond))) * time.Microsecond)
			res, err := lim.AllowN(ctx, "k", 1+r.IntN(l.Burst), l)
			if err != nil {
				t.Fatal(err)
			}
			w := effectiveWindow(res.Limit, res.Remaining, res.ResetAfter)
			if res.Remaining >= l.Burst || w < 2*time.Microsecond {
				continue
			}
			at := func(d time.Duration) int {
				clk.advance(d)
				defer clk.advance(-d)
				pk, err := lim.Peek(ctx, "k", l)
				if err != nil {
					t.Fatal(err)
				}
				return pk.Remaining
			}
			if got := at(w - 2*time.Microsecond); got != res.Remaining {
				t.Fatalf("%v: %+v: window %v, but %d left %v later", l, res, w, got, w-2*time.Microsecond)
			}
			// The limiter's clock counts whole microseconds.
			if got := at(w.Round(time.Microsecond) + time.Microsecond); got <= res.Remaining {
				t.Fatalf("%v: %+v: window %v, but still %d left then", l, res, w, got)
			}
		}
	}
}

func TestEffectiveWindowEdges(t *testing.T) {
	tests := []struct {
		name      string
		limit     core.Limit
		remaining int
		reset     time.Duration
		want      time.Duration
	}{
		{"one taken of 10/s", core.PerSecond(10), 9, 100 * time.Millisecond, 100 * time.Millisecond},
		{"five taken of 10/s", core.PerSecond(10), 5, 500 * time.Millisecond, 100 * time.Millisecond},
		{"empty 1000/h", core.PerHour(1000), 0, time.Hour, 3600 * time.Millisecond},
		// 333333.33µs is a third of a second; the estimate is at most a
		// microsecond over.
		{"fractional interval", core.PerSecond(3), 0, time.Second, 333333334 * time.Nanosecond},
		{"full bucket (fail open)", core.PerMinute(2), 2, 0, 30 * time.Second},
		{"inconsistent input", core.PerMinute(2), 0, time.Second, 0},
	}
	for _, tt := range tests {
		if got := effectiveWindow(tt.limit, tt.remaining, tt.reset); got != tt.want {
			t.Errorf("%s: effectiveWindow(%v, %d, %v) = %v, want %v", tt.name, tt.limit, tt.remaining, tt.reset, got, tt.want)
		}
	}
}

// TestHeadersProperties sends random traffic, with random costs, through a
// policy of several limits and checks on every answer what the fields
// promise one another.
func TestHeadersProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := range 20 {
		limits := make([]core.Limit, 1+r.IntN(3))
		for i := range limits {
			limits[i] = core.Limit{Rate: 1 + r.IntN(30), Period: time.Duration(1+r.IntN(120)) * time.Second, Burst: 3 + r.IntN(10)}
			if r.IntN(2) == 0 {
				limits[i].Name = "l" + strconv.Itoa(i)
			}
		}
		p, clk := newClockedPolicy(t, limits[0], WithLimits[req, struct{}](limits[1:]...), WithHeaders[req, struct{}](HeadersBoth),
			WithProblemJSON[req, struct{}](true), WithCost[req, struct{}](func(req) int { return 1 + r.IntN(3) }))
		policyItems := map[string]bool{}
		for _, l := range limits {
			policyItems[limitItem(l)] = true
		}
		for i := range 300 {
			clk.advance(time.Duration(r.Int64N(int64(2 * time.Second))))
			v := p.Decide(context.Background(), fakeReq{})
			h := headersOf(v)
			where := func() string {
				return "round " + strconv.Itoa(round) + " request " + strconv.Itoa(i) + ": " + strings.Join(headerLines(h), "; ")
			}
			item, params, _ := strings.Cut(h["RateLimit"], ";")
			if !policyItems[item] {
				t.Fatalf("%s: RateLimit names %s, not in RateLimit-Policy", where(), item)
			}
			rs, ts, _ := strings.Cut(params, ";")
			if rs != "r="+h["X-RateLimit-Remaining"] {
				t.Fatalf("%s: r differs from X-RateLimit-Remaining", where())
			}
			tv, err := strconv.Atoi(strings.TrimPrefix(ts, "t="))
			if err != nil || tv < 1 {
				t.Fatalf("%s: t is not a positive integer", where())
			}
			reset, _ := strconv.Atoi(h["X-RateLimit-Reset"])
			if tv > reset && h["X-RateLimit-Remaining"] != h["X-RateLimit-Limit"] {
				t.Fatalf("%s: the window ends after the bucket is full", where())
			}
			if v.Action != Deny {
				continue
			}
			ra, err := strconv.Atoi(h["Retry-After"])
			if err != nil || int64(ra) != ceilSeconds(v.Result.RetryAfter) {
				t.Fatalf("%s: Retry-After for a wait of %v", where(), v.Result.RetryAfter)
			}
			if tv > ra {
				t.Fatalf("%s: the window ends after Retry-After", where())
			}
			_, body := v.Body()
			var pd struct {
				Type     string   `json:"type"`
				Detail   string   `json:"detail"`
				Violated []string `json:"violated-policies"`
			}
			if err := json.Unmarshal(body, &pd); err != nil {
				t.Fatalf("%s: body %s: %v", where(), body, err)
			}
			if len(pd.Violated) != 1 || strconv.Quote(pd.Violated[0]) != item {
				t.Fatalf("%s: violated-policies %q, want the item %s", where(), pd.Violated, item)
			}
			if !strings.Contains(pd.Detail, "retry after "+h["Retry-After"]+" s") {
				t.Fatalf("%s: detail %q", where(), pd.Detail)
			}
		}
	}
}

func headerLines(h map[string]string) []string {
	var out []string
	for _, k := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
		if v, ok := h[k]; ok {
			out = append(out, k+": "+v)
		}
	}
	return out
}

// TestProblemBody checks the problem details of a 429 and of a failure.
func TestProblemBody(t *testing.T) {
	ctx := context.Background()
	t.Run("quota exceeded names the limit that denied", func(t *testing.T) {
		sec := core.PerSecond(1).WithName(`per "second"`)
		p, _ := newClockedPolicy(t, sec, WithLimits[req, struct{}](core.PerHour(100)), WithProblemJSON[req, struct{}](true))
		p.Decide(ctx, fakeReq{})
		v := p.Decide(ctx, fakeReq{})
		ct, body := v.Body()
		want := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,` +
			`"detail":"Rate limit exceeded; retry after 1 s.","violated-policies":["per \"second\""]}`
		if v.Action != Deny || ct != "application/problem+json" || string(body) != want {
			t.Fatalf("Body() = %q, %s\nwant %s", ct, body, want)
		}
		var pd map[string]any
		if err := json.Unmarshal(body, &pd); err != nil {
			t.Fatal(err)
		}
		if got := pd["violated-policies"].([]any)[0]; got != `per "second"` {
			t.Fatalf("violated-policies[0] = %q", got)
		}
	})
	t.Run("failures stay about:blank", func(t *testing.T) {
		p, _ := newClockedPolicy(t, core.PerSecond(1), WithProblemJSON[req, struct{}](true))
		p.key = keyfunc.Tenant("X-Tenant")
		v := p.Decide(ctx, fakeReq{})
		_, body := v.Body()
		want := `{"type":"about:blank","title":"Bad Request","status":400,"detail":"The request carries no rate-limit key."}`
		if string(body) != want {
			t.Fatalf("Body() = %s, want %s", body, want)
		}
	})
	t.Run("plain text without the option", func(t *testing.T) {
		p, _ := newClockedPolicy(t, core.PerSecond(1))
		p.Decide(ctx, fakeReq{})
		v := p.Decide(ctx, fakeReq{})
		if ct, body := v.Body(); ct != "text/plain; charset=utf-8" || string(body) != "Too Many Requests\n" {
			t.Fatalf("Body() = %q, %q", ct, body)
		}
	})
}

// TestRetryJitter checks that WithRetryJitter spreads Retry-After over the
// bound, never earlier than the wait nor later than the wait plus the
// bound, with the body saying the same as the field, and that the window
// and the deny handler's Result are left alone.
func TestRetryJitter(t *testing.T) {
	ctx := context.Background()
	p, _ := newClockedPolicy(t, core.PerMinute(1).WithName("m"), WithRetryJitter[req, struct{}](10*time.Second),
		WithHeaders[req, struct{}](HeadersIETF), WithProblemJSON[req, struct{}](true))
	p.Decide(ctx, fakeReq{})
	seen := map[string]bool{}
	for range 2000 {
		v := p.Decide(ctx, fakeReq{})
		h := headersOf(v)
		ra, _ := strconv.Atoi(h["Retry-After"])
		if ra < 60 || ra > 70 {
			t.Fatalf("Retry-After %d for a wait of 60 s and a jitter of 10 s", ra)
		}
		if v.Result.RetryAfter != time.Minute || h["RateLimit"] != `"m";r=0;t=60` {
			t.Fatalf("jitter reached the Result (%v) or the window (%s)", v.Result.RetryAfter, h["RateLimit"])
		}
		if _, body := v.Body(); !strings.Contains(string(body), "retry after "+h["Retry-After"]+" s.") {
			t.Fatalf("body %s with Retry-After %s", body, h["Retry-After"])
		}
		seen[h["Retry-After"]] = true
	}
	// Rounded up, any jitter at all makes 61: 60 is all but impossible.
	if len(seen) < 10 {
		t.Fatalf("Retry-After took %d distinct values over 2000 denials, want 61 to 70: %v", len(seen), seen)
	}

	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := New(lim, core.PerMinute(1), keyfunc.Static("k"), self, WithRetryJitter[req, struct{}](-time.Second)); err == nil ||
		!strings.Contains(err.Error(), "WithRetryJitter") {
		t.Fatalf("New with a negative jitter: %v", err)
	}
}

// TestWriteHeadersMatchesHeaders checks that both ways of writing the
// fields give the same fields, under Go's canonical names.
func TestWriteHeadersMatchesHeaders(t *testing.T) {
	p, _ := newClockedPolicy(t, core.PerSecond(1), WithHeaders[req, struct{}](HeadersBoth), WithLimits[req, struct{}](core.PerHour(10)))
	for range 3 {
		v := p.Decide(context.Background(), fakeReq{})
		h := map[string][]string{}
		v.WriteHeaders(h)
		want := map[string][]string{}
		v.Headers(func(name, value string) { want[canonicalName(name)] = []string{value} })
		if !maps.EqualFunc(h, want, func(a, b []string) bool { return len(a) == 1 && len(b) == 1 && a[0] == b[0] }) {
			t.Fatalf("WriteHeaders = %v, Headers = %v", h, want)
		}
	}
}

// canonicalName is textproto.CanonicalMIMEHeaderKey for the names used
// here.
func canonicalName(s string) string {
	b := []byte(strings.ToLower(s))
	up := true
	for i, c := range b {
		if up && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		up = c == '-'
	}
	return string(b)
}

// TestQuotaUnit: WithQuotaUnit names the unit on every RateLimit-Policy
// item, and the constructor refuses a unit the draft does not register.
func TestQuotaUnit(t *testing.T) {
	p := newTestPolicy(t, core.PerMinute(600).WithName("bytes"), keyfunc.Static("k"),
		WithHeaders[req, struct{}](HeadersIETF), WithLimits[req, struct{}](core.PerHour(10_000).WithName("hour")),
		WithQuotaUnit[req, struct{}]("content-bytes"))
	v := p.Decide(context.Background(), fakeReq{})
	want := `"bytes";q=600;w=60;qu="content-bytes", "hour";q=10000;w=3600;qu="content-bytes"`
	if got := headersOf(v)["RateLimit-Policy"]; got != want {
		t.Errorf("RateLimit-Policy = %s, want %s", got, want)
	}
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := New(lim, core.PerMinute(1), keyfunc.Static("k"), self, WithQuotaUnit[req, struct{}]("tokens")); err == nil || !strings.Contains(err.Error(), `unknown unit "tokens"`) {
		t.Errorf("WithQuotaUnit(\"tokens\"): %v, want an error naming it", err)
	}
}
