package outbound

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// onceLimited is an upstream whose first call is answered 429 with
// Retry-After: 30, and every other 200; it counts the calls.
func onceLimited(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// TestRetryAfterPausesFleet is done-when 2 on a real Redis: one replica's
// 429 with Retry-After: 30 pauses the calls of all three for 30 s (less
// the time the test took), and no call reaches the upstream meanwhile.
func TestRetryAfterPausesFleet(t *testing.T) {
	srv, calls := onceLimited(t)
	budgets, clients := replicas(t, fleet(t, 3), core.PerSecond(100), WithFailFast(true))
	resp, err := clients[0].Get(srv.URL)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("first call: %v, %v; want the upstream's 429", resp, err)
	}
	_ = resp.Body.Close()
	for i, c := range clients {
		_, err := c.Get(srv.URL)
		var le *LimitedError
		if !errors.As(err, &le) || !le.Paused || le.RetryAfter <= 29*time.Second || le.RetryAfter > 30*time.Second {
			t.Errorf("replica %d: call = %v; want refused, paused for 30 s less the test's time", i, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the upstream saw %d calls, want 1", n)
	}
	for i, b := range budgets {
		if st := b.Stats(); st.Refused != 1 {
			t.Errorf("replica %d: %+v, want 1 refused", i, st)
		}
	}
	if st := budgets[0].Stats(); st.Paused != 1 {
		t.Errorf("replica 0: %+v, want 1 pause", st)
	}
}

// TestRetryAfterPauseEnds is done-when 2 on a clock the test moves: three
// budgets on one limiter's store (a NewMemory limiter stands for Redis)
// are paused from the 429 until 30 s later, not a microsecond less, and
// call again then.
func TestRetryAfterPauseEnds(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	lim, err := core.NewMemory(core.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	srv, calls := onceLimited(t)
	budgets, clients := replicas(t, []*core.Limiter{lim, lim, lim}, core.PerSecond(100), WithFailFast(true))
	resp, err := clients[1].Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	key := "host:" + srv.Listener.Addr().String()
	ctx := context.Background()
	for _, step := range []struct {
		at    time.Duration
		admit bool
	}{
		{0, false}, {29 * time.Second, false}, {30*time.Second - time.Microsecond, false}, {30 * time.Second, true},
	} {
		now = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).Add(step.at)
		for i, b := range budgets {
			err := b.Take(ctx, key)
			if (err == nil) != step.admit {
				t.Errorf("at %v: replica %d: Take = %v, want admitted %v", step.at, i, err, step.admit)
			}
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the upstream saw %d calls, want 1", n)
	}
}
