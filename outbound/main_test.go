package outbound

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/redistest"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }

// fleet returns n limiters on the Redis at addr sharing one prefix
// private to the test: the replicas of one service. They are closed at
// the test's end.
func fleet(t testing.TB, n int) []*core.Limiter {
	t.Helper()
	_, _, lims := fleetOn(t, n)
	return lims
}

// fleetOn is fleet, and also returns the Redis's address and the key
// prefix of the limiters.
func fleetOn(t testing.TB, n int) (addr, prefix string, lims []*core.Limiter) {
	t.Helper()
	addr = redistest.Addr(t)
	prefix = fmt.Sprintf("outboundtest:%d:", time.Now().UnixNano())
	for range n {
		lim, err := core.New(redistest.NewClient(t, addr), core.WithPrefix(prefix), core.WithTimeout(time.Second), core.WithFallbackReplicas(n))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lim.Close() })
		lims = append(lims, lim)
	}
	return addr, prefix, lims
}

// windowUpstream is a fake upstream API on loopback that allows quota
// calls per fixed window of window (whole seconds, counted from its
// start) and says so in the draft's fields: RateLimit-Policy on every
// response, RateLimit with what is left and the seconds to the window's
// end (rounded up), and Retry-After on a 429. It counts, per window, the
// calls that arrived, that it admitted and that it refused.
type windowUpstream struct {
	srv    *httptest.Server
	start  time.Time
	window time.Duration
	quota  int

	mu                         sync.Mutex
	arrived, admitted, refused map[int]int
}

func newWindowUpstream(t testing.TB, quota int, window time.Duration) *windowUpstream {
	u := &windowUpstream{window: window, quota: quota, arrived: map[int]int{}, admitted: map[int]int{}, refused: map[int]int{}}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	u.start = time.Now()
	return u
}

func (u *windowUpstream) serve(w http.ResponseWriter, _ *http.Request) {
	now := time.Since(u.start)
	win := int(now / u.window)
	left := u.window*time.Duration(win+1) - now
	t := strconv.FormatInt(int64((left+time.Second-1)/time.Second), 10)
	u.mu.Lock()
	u.arrived[win]++
	ok := u.admitted[win] < u.quota
	if ok {
		u.admitted[win]++
	} else {
		u.refused[win]++
	}
	r := u.quota - u.admitted[win]
	u.mu.Unlock()
	h := w.Header()
	h.Set("RateLimit-Policy", `"api";q=`+strconv.Itoa(u.quota)+`;w=`+strconv.Itoa(int(u.window/time.Second)))
	h.Set("RateLimit", `"api";r=`+strconv.Itoa(r)+`;t=`+t)
	if !ok {
		h.Set("Retry-After", t)
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// counts returns the calls that arrived in window win, that were
// admitted and refused.
func (u *windowUpstream) counts(win int) (arrived, admitted, refused int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.arrived[win], u.admitted[win], u.refused[win]
}

// hammer sends GETs to url through each client from per goroutines each
// until ctx ends, and returns the statuses the callers saw and the
// errors other than ctx's.
func hammer(ctx context.Context, clients []*http.Client, per int, url string) (statuses map[int]int, errs []error) {
	statuses = map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range clients {
		for range per {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
					resp, err := c.Do(req)
					mu.Lock()
					switch {
					case err != nil && ctx.Err() == nil:
						errs = append(errs, err)
					case err == nil:
						statuses[resp.StatusCode]++
					}
					mu.Unlock()
					if err == nil {
						_ = resp.Body.Close()
					}
				}
			})
		}
	}
	wg.Wait()
	return statuses, errs
}

// stalls watches this process's scheduling until ctx ends: a goroutine
// that asks to sleep for a millisecond at a time, and records, per
// window of length window since start, how long beyond that it slept,
// summed over the sleeps that overran by more than grace. A busy machine
// (the tests run beside others on two cores) stalls the callers as much,
// and callers that come late for their tokens, each after the other,
// lose what the bucket refills beyond its burst meanwhile: the
// throughput tests allow for it. On a quiet machine a sleep overruns by
// well under a millisecond, and nothing is allowed for.
func stalls(ctx context.Context, start time.Time, window, grace time.Duration) func(win int) time.Duration {
	var mu sync.Mutex
	lost := map[int]time.Duration{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			t0 := time.Now()
			time.Sleep(time.Millisecond)
			if over := time.Since(t0) - time.Millisecond; over > grace {
				mu.Lock()
				lost[int(t0.Sub(start)/window)] += over - grace
				mu.Unlock()
			}
		}
	}()
	return func(win int) time.Duration {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return lost[win]
	}
}
