package policy

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// TestHeadersStepped: a calendar quota's fields say its period (w, the
// current one's length) and the seconds until its boundary; an interval
// refill's say the whole intervals its burst takes.
func TestHeadersStepped(t *testing.T) {
	day := core.PerCalendarDay(3, "America/New_York").WithName("day")
	sec := core.PerSecond(10).WithName("sec")
	p, clk := newClockedPolicy(t, sec, WithLimits[req, struct{}](day), WithHeaders[req, struct{}](HeadersBoth))
	// The clock starts at 2027-01-01 00:00 UTC, 19:00 in New York: five
	// hours to midnight there.
	start, end := day.Window(time.Now())
	w := strconv.FormatInt(int64(end.Sub(start)/time.Second), 10)
	policyWant := `"sec";q=10;w=1, "day";q=3;w=` + w
	var h map[string]string
	for range 3 {
		h = headersOf(p.Decide(context.Background(), fakeReq{}))
	}
	want := map[string]string{
		"RateLimit-Policy": policyWant, "RateLimit": `"day";r=0;t=18000`,
		"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "18000",
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, h[k], v, h)
		}
	}
	clk.advance(time.Hour)
	h = headersOf(p.Decide(context.Background(), fakeReq{}))
	if h["Retry-After"] != "14400" || h["RateLimit"] != `"day";r=0;t=14400` {
		t.Errorf("denied an hour later: %v, want Retry-After and t 14400 (midnight in New York)", h)
	}

	if got := refillSeconds(core.PerInterval(10, time.Minute).WithBurst(25)); got != 180 {
		t.Errorf("refillSeconds(10 a minute, burst 25) = %d, want 180 (3 intervals)", got)
	}
	for _, tt := range []struct {
		remaining int
		reset     time.Duration
		want      time.Duration
	}{
		{25, 0, time.Minute},                                    // full: one interval
		{20, 10 * time.Second, 10 * time.Second},                // 5 short: the next interval tops it up
		{0, 130 * time.Second, 10 * time.Second},                // 25 short: 3 intervals, the first ends in 10 s
		{5, 70 * time.Second, 10 * time.Second},                 // 20 short: 2 intervals
		{0, 200 * time.Second, 200*time.Second - 2*time.Minute}, // a reservation's debt
	} {
		if got := effectiveWindow(core.PerInterval(10, time.Minute).WithBurst(25), tt.remaining, tt.reset); got != tt.want {
			t.Errorf("effectiveWindow(interval, %d, %v) = %v, want %v", tt.remaining, tt.reset, got, tt.want)
		}
	}
}
