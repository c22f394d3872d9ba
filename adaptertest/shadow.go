package adaptertest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// shadowLog is an observer that counts the would-be denials of each
// shadow limit it is told of, by name.
type shadowLog struct {
	mu     sync.Mutex
	denied map[string]int
}

func (s *shadowLog) ObserveDecision(res core.Result, _ core.Source) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range res.Shadow.Len() {
		if res.Shadow.Denied(i) {
			s.denied[res.Shadow.Limit(i).Name]++
		}
	}
}

func (*shadowLog) ObserveStore(core.StoreCall)       {}
func (*shadowLog) ObserveDegraded(core.StoreOutage)  {}
func (*shadowLog) ObserveRecovered(core.StoreOutage) {}

// shadow is the conformance case of WithShadowLimits: the middleware
// answers as it would without its shadow limit (the same statuses and
// fields), the deny handler sees the shadow limit's verdict in its
// Result, and the limiter's observer is told each would-be denial.
func shadow() Scenario {
	log := &shadowLog{}
	deniedSoFar := func(want int) func() error {
		return func() error {
			log.mu.Lock()
			defer log.mu.Unlock()
			if got := log.denied["lower"]; got != want {
				return fmt.Errorf("the observer was told %d would-be denials of the shadow limit, want %d", got, want)
			}
			return nil
		}
	}
	get := func() Request { return req("/items/1", "X-Tenant", "acme") }
	return Scenario{
		Name: "shadow limits change no response and are reported",
		Limiter: func(tb testing.TB) *core.Limiter {
			log.mu.Lock()
			log.denied = map[string]int{} // a new run of the scenario
			log.mu.Unlock()
			lim, err := core.NewMemory(core.WithClock(func() time.Time { return FrozenTime }), core.WithObserver(log))
			if err != nil {
				tb.Fatal(err)
			}
			return lim
		},
		Use: &Middleware{
			Limit: core.PerMinute(3), Key: keyfunc.Tenant("X-Tenant"), Shadow: []core.Limit{core.PerMinute(1).WithName("lower")},
			Deny: func(res core.Result) Reply {
				return Reply{Status: 429, ContentType: "text/plain", Body: fmt.Sprintf("lower would deny: %v", res.Shadow.Denied(0))}
			},
		},
		Routes: []Route{{Method: "GET", Pattern: "/items/{id}"}},
		Steps: []Step{
			{Request: get(), Want: Want{Status: 200, Header: legacy(3, 2, 20), Body: OK}, Check: deniedSoFar(0)},
			{Request: get(), Want: Want{Status: 200, Header: legacy(3, 1, 40), Body: OK}, Check: deniedSoFar(1)},
			{Request: get(), Want: Want{Status: 200, Header: legacy(3, 0, 60), Body: OK}, Check: deniedSoFar(2)},
			{Request: get(), Want: Want{Status: 429, Header: map[string]string{"Retry-After": "20"}, ContentType: "text/plain", Body: "lower would deny: true"}, Check: deniedSoFar(3)},
		},
	}
}
