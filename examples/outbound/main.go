// Command outbound runs three replicas of a service that call one
// upstream API through a fleet-wide budget (package outbound). The fake
// upstream allows 50 calls per fixed window of 1 s and says so in the
// draft's fields (RateLimit-Policy, RateLimit, and Retry-After on a 429);
// the replicas are configured with the limit its documentation would give
// (50 a second) and 4 callers each.
//
// The budget learns the policy from the first responses and keeps the
// fleet to 49 a second with a burst of 1, so after the first window no
// window holds more than 50 calls and none is refused. (The first window
// ends with a pause until the next: its last answer says r=0 with t in
// whole seconds, so with windows of a second the second window is mostly
// paused; with an API's minute it is not.) Then the upstream answers one
// call 429 with Retry-After: 2, and every replica's calls pause for 2 s.
// It uses an embedded miniredis unless REDIS_ADDR is set.
//
//	go run ./examples/outbound [-windows 4]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoredis"
	"github.com/sluicehq/sluice/outbound"
)

const (
	quota  = 50
	window = time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("outbound", flag.ContinueOnError)
	fs.SetOutput(stdout)
	windows := fs.Int("windows", 4, "how many windows of 1 s the replicas call for")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *windows < 1 {
		return fmt.Errorf("-windows %d: want at least 1", *windows)
	}
	srv, err := demoredis.Start(stdout)
	if err != nil {
		return err
	}
	defer srv.Close()

	up := newUpstream()
	defer up.srv.Close()

	var budgets []*outbound.Budget
	var clients []*http.Client
	for range 3 { // three replicas: each its own Redis client, limiter and budget
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer rdb.Close()
		lim, err := core.New(rdb, core.WithTimeout(time.Second), core.WithFallbackReplicas(3))
		if err != nil {
			return err
		}
		defer lim.Close()
		b, err := outbound.New(lim, core.Limit{Rate: quota, Period: window, Burst: quota}, outbound.WithName("upstream"))
		if err != nil {
			return err
		}
		defer b.Close()
		budgets = append(budgets, b)
		clients = append(clients, &http.Client{Transport: b.Transport(outbound.Host(), nil)})
	}

	fmt.Fprintf(stdout, "three replicas, 4 callers each, call an upstream allowing %d calls per %v window\n", quota, window)
	callFor(ctx, clients, up.srv.URL, "learn", time.Duration(*windows)*window)
	for win := range *windows {
		arrived, refused := up.counts(win)
		fmt.Fprintf(stdout, "window %d: %d calls arrived, %d refused\n", win, arrived, refused)
	}
	fmt.Fprintf(stdout, "limit learned: %v\n", budgets[0].Limit("host:"+up.srv.Listener.Addr().String()))

	// One 429 with Retry-After: 2 pauses the whole fleet. Only a call of
	// this phase gets it: a call the first phase gave up on at its end
	// may reach the upstream late, and its answer is read by no one.
	up.refuseNext.Store(true)
	callFor(ctx, clients, up.srv.URL, "pause", 2*window)
	fmt.Fprintf(stdout, "after a 429 with Retry-After: 2, the upstream saw %d calls in 2 s: the 429, and those already sent when it came\n", up.paused.Load())
	for i, b := range budgets {
		st := b.Stats()
		fmt.Fprintf(stdout, "replica %d: %d sent, %d waited, %d pauses applied\n", i, st.Sent, st.Waited, st.Paused)
	}
	return nil
}

// callFor makes calls through each client from 4 goroutines for d, each
// with phase in its Demo-Phase header.
func callFor(ctx context.Context, clients []*http.Client, url, phase string, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range clients {
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
					req.Header.Set("Demo-Phase", phase)
					if resp, err := c.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
					}
				}
			})
		}
	}
	wg.Wait()
}

// upstream is the fake API: quota calls per fixed window, counted from
// its start, said in the draft's fields.
type upstream struct {
	srv        *httptest.Server
	start      time.Time
	refuseNext atomic.Bool  // answer the next call of the pause phase 429, Retry-After: 2
	paused     atomic.Int64 // the calls of the pause phase

	mu               sync.Mutex
	arrived, refused map[int]int
	admitted         map[int]int
}

func newUpstream() *upstream {
	u := &upstream{start: time.Now(), arrived: map[int]int{}, refused: map[int]int{}, admitted: map[int]int{}}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	pausePhase := r.Header.Get("Demo-Phase") == "pause"
	if pausePhase {
		u.paused.Add(1)
	}
	now := time.Since(u.start)
	win := int(now / window)
	t := strconv.FormatInt(int64((window*time.Duration(win+1)-now+time.Second-1)/time.Second), 10)
	u.mu.Lock()
	u.arrived[win]++
	ok := u.admitted[win] < quota
	if ok {
		u.admitted[win]++
	} else {
		u.refused[win]++
	}
	left := quota - u.admitted[win]
	u.mu.Unlock()
	h := w.Header()
	h.Set("RateLimit-Policy", `"api";q=`+strconv.Itoa(quota)+`;w=1`)
	h.Set("RateLimit", `"api";r=`+strconv.Itoa(left)+`;t=`+t)
	switch {
	case pausePhase && u.refuseNext.CompareAndSwap(true, false):
		h.Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
	case !ok:
		h.Set("Retry-After", t)
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

func (u *upstream) counts(win int) (arrived, refused int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.arrived[win], u.refused[win]
}
