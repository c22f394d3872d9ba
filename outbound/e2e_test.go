package outbound

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
)

// TestEndToEndAgainstHTTPLimit is done-when 3: the upstream is sluice's
// own middleware (httplimit, 20 calls a second with a burst of 20, the
// draft's fields), on its own limiter; three replicas of 20 goroutines
// call it through budgets configured with the same limit and WithRetry.
// Over 10 windows (10 s; the policy's window is 1 s), no 429 reaches the
// callers' code, and the budgets keep the upstream busy.
//
// The budgets learn the policy (q=20;w=1) and keep to 19 a second with a
// burst of 1, so the upstream's bucket never runs dry in steady state;
// a 429 that still happens (a call the middleware decides before one
// sent earlier, as goroutines are scheduled; or while the replicas
// learn) pauses the fleet and is retried after the pause, unseen by the
// caller. The test logs how many the upstream sent.
func TestEndToEndAgainstHTTPLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s load test")
	}
	addr := redistest.Addr(t)
	upLim, err := core.New(redistest.NewClient(t, addr), core.WithPrefix(fmt.Sprintf("outboundtest:up:%d:", time.Now().UnixNano())), core.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = upLim.Close() })
	limit := core.PerSecond(20)
	var sent429, sent200 atomic.Int64
	mw := httplimit.New(upLim, limit, keyfunc.Static("api"), httplimit.WithHeaders(policy.HeadersIETF))
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { sent200.Add(1) })))
	t.Cleanup(srv.Close)
	count := func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(r)
			if err == nil && resp.StatusCode == http.StatusTooManyRequests {
				sent429.Add(1)
			}
			return resp, err
		})
	}
	lims := fleet(t, 3)
	var clients []*http.Client
	var budgets []*Budget
	for _, lim := range lims {
		b, err := New(lim, limit, WithName("e2e"), WithRetry(3))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		next := &http.Transport{MaxIdleConnsPerHost: 32}
		t.Cleanup(next.CloseIdleConnections)
		budgets = append(budgets, b)
		clients = append(clients, &http.Client{Transport: b.Transport(Host(), count(next))})
	}
	const windows = 10
	ctx, cancel := context.WithTimeout(context.Background(), windows*time.Second)
	defer cancel()
	stalled := stalls(ctx, time.Now(), time.Second, time.Second/19/4)
	statuses, errs := hammer(ctx, clients, 20, srv.URL)
	for _, err := range errs {
		if !errors.Is(err, ErrLimited) {
			t.Errorf("call failed: %v", err)
		}
	}
	t.Logf("callers saw %v; the upstream sent %d 200s and %d 429s", statuses, sent200.Load(), sent429.Load())
	// What package policy writes is what this package reads: the
	// middleware's RateLimit-Policy, "20/s";q=20;w=1, lowered the limit.
	key := "host:" + srv.Listener.Addr().String()
	for i, b := range budgets {
		if got, want := b.Limit(key), (core.Limit{Rate: 19, Period: time.Second, Burst: 1}); got != want {
			t.Errorf("replica %d: limit %v, want %v", i, got, want)
		}
	}
	if statuses[http.StatusTooManyRequests] > 0 {
		t.Errorf("%d 429s reached the callers, want none", statuses[http.StatusTooManyRequests])
	}
	// The budgets keep the upstream busy: 19 a second (a token every
	// 1/19 s, its burst of one lasting that long), less a second for each
	// pause the fleet took (the fields say t and Retry-After in whole
	// seconds, here 1) and what this process's stalls could lose on a busy
	// machine (see stalls); far below that is a budget that stopped
	// calling.
	pauses := int64(0)
	for _, b := range budgets {
		pauses += b.Stats().Paused
	}
	interval := time.Second / 19
	lost := int64(0)
	for win := range windows {
		lost += int64(stalled(win) / interval)
	}
	want := 19*windows - 20*pauses - lost - 20 // 20: the first window, learning
	t.Logf("%d pauses; stalls could lose %d calls; want at least %d admitted", pauses, lost, want)
	if n := sent200.Load(); n < want {
		t.Errorf("the upstream admitted %d calls in %d s, want at least %d", n, windows, want)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
