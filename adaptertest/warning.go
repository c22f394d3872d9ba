package adaptertest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// warningField is the response field of WithWarning.
const warningField = "X-RateLimit-Warning"

// warning is the conformance case of WithWarning: at 0.6 of a burst of
// 5, the third admission and every later one carry X-RateLimit-Warning
// (the threshold as a percentage) beside the usual fields, the first two
// and the 429 do not; the limiter's threshold handler is told once, at
// the crossing. Under HeadersNone the mark is still written.
func warning(style string) Scenario {
	var mu sync.Mutex
	var events []core.ThresholdEvent
	told := func(want int) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(events) != want {
				return fmt.Errorf("the threshold handler was told %d times, want %d", len(events), want)
			}
			if want > 0 && (events[0].Key != "tenant:a" || events[0].Threshold != 0.6 || events[0].Remaining != 2) {
				return fmt.Errorf("the threshold handler was told %+v, want tenant:a at 0.6 with 2 left", events[0])
			}
			return nil
		}
	}
	m := &Middleware{Limit: core.PerMinute(5), Key: keyfunc.Tenant("X-Tenant"), Warning: 0.6}
	mark := func(remaining int) map[string]string {
		h := legacy(5, remaining, 12*(5-remaining))
		h[warningField] = "60"
		return h
	}
	plain := func(remaining int) map[string]string { return legacy(5, remaining, 12*(5-remaining)) }
	if style == "none" {
		m.Headers = policy.HeadersNone
		mark = func(int) map[string]string { return map[string]string{warningField: "60"} }
		plain = func(int) map[string]string { return nil }
	}
	a := func() Request { return req("/items/1", "X-Tenant", "a") }
	return Scenario{
		Name: "a warning threshold marks admissions close to the limit (" + style + " headers)",
		Limiter: func(tb testing.TB) *core.Limiter {
			tb.Helper()
			mu.Lock()
			events = nil // a new run of the scenario
			mu.Unlock()
			lim, err := core.NewMemory(core.WithClock(func() time.Time { return FrozenTime }), core.WithThresholdHandler(func(ev core.ThresholdEvent) {
				mu.Lock()
				events = append(events, ev)
				mu.Unlock()
			}))
			if err != nil {
				tb.Fatal(err)
			}
			return lim
		},
		Use:    m,
		Routes: []Route{{Method: "GET", Pattern: "/items/{id}"}},
		Steps: []Step{
			{Request: a(), Want: Want{Status: 200, Header: plain(4), Absent: []string{warningField}, Body: OK}, Check: told(0)},
			{Request: a(), Want: Want{Status: 200, Header: plain(3), Absent: []string{warningField}, Body: OK}, Check: told(0)},
			{Request: a(), Want: Want{Status: 200, Header: mark(2), Body: OK}, Check: told(1)},
			{Request: a(), Want: Want{Status: 200, Header: mark(1), Body: OK}, Check: told(1)},
			{Request: a(), Want: Want{Status: 200, Header: mark(0), Body: OK}, Check: told(1)},
			{Request: a(), Want: Want{Status: 429, Header: map[string]string{"Retry-After": "12"}, Absent: []string{warningField}, Body: tooMany}, Check: told(1)},
			{Request: req("/items/1", "X-Tenant", "b"), Want: Want{Status: 200, Header: plain(4), Absent: []string{warningField}, Body: OK}, Check: told(1)},
		},
	}
}
