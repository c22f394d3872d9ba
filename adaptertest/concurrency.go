package adaptertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
)

// concurrencyWait bounds every wait of [CheckConcurrency].
const concurrencyWait = 10 * time.Second

// doHeader is the request field that tells the route's handler of
// [CheckConcurrency] what to do: "hold" its slot until the test lets it
// go, or "panic".
const doHeader = "X-Adaptertest-Do"

// CheckConcurrency checks an adapter's WithConcurrency: a middleware with a
// cap of 1 per tenant, on a route whose handler may block or panic. While
// one request is held in the handler, a second of the same tenant is
// refused (429, Retry-After 1, the cap's header fields and problem body)
// and another tenant's goes through; once the first returns, its slot is
// free again, and so it is after a handler that panicked and after one
// whose client hung up while it ran. It runs on a limiter in memory and on
// a real Redis ([redistest.Addr]; skipped without one, except under CI).
//
// build must support [Middleware.Concurrency] and [Route.Handler], recover
// a handler's panic outside the middleware (the framework's recover
// middleware, or a wrapper around the router) answering 500, and return a
// Serve that may be called from several goroutines at once.
func CheckConcurrency(t *testing.T, build Build) {
	t.Helper()
	for _, tc := range []struct {
		name    string
		limiter func(testing.TB) *core.Limiter
	}{{"memory", Memory}, {"redis", realRedis}} {
		t.Run(tc.name, func(t *testing.T) { checkConcurrency(t, build, tc.limiter(t)) })
	}
}

// realRedis returns a limiter on the Redis of [redistest.Addr], closed
// when the test ends.
func realRedis(tb testing.TB) *core.Limiter {
	tb.Helper()
	lim, err := core.New(redistest.NewClient(tb, redistest.Addr(tb)), core.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		tb.Fatalf("core.New() = %v", err)
	}
	tb.Cleanup(func() { _ = lim.Close() })
	return lim
}

func checkConcurrency(t *testing.T, build Build, lim *core.Limiter) {
	// The handler tells the test it holds its slot with a channel on
	// which the test lets it go; stop lets every handler go when the test
	// ends, however it ends.
	entered := make(chan chan struct{})
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	var inFlight, most atomic.Int32 // handlers running "count", and the most at once
	handler := func(c Call) {
		switch c.Header(doHeader) {
		case "count":
			n := inFlight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			for range 100 {
				runtime.Gosched() // give another request the time to come in
			}
			inFlight.Add(-1)
		case "hold":
			free := make(chan struct{})
			select {
			case entered <- free:
			case <-stop:
				return
			}
			select {
			case <-free:
			case <-stop:
			}
		case "panic":
			panic("adaptertest: the handler panics")
		}
	}
	serve := build(t, App{Limiter: lim, Routes: []Route{{
		Method:  "POST",
		Pattern: "/upload",
		Middleware: &Middleware{
			Limit:       core.PerMinute(1000).WithName("rate"),
			Key:         keyfunc.Tenant("X-Tenant"),
			Headers:     policy.HeadersBoth,
			ProblemJSON: true,
			Concurrency: core.ConcurrencyLimit{Name: "uploads", Max: 1},
		},
		Handler: handler,
	}}})

	// A tenant of this run's own, in case the Redis is shared.
	var b [6]byte
	_, _ = rand.Read(b[:])
	acme, other := "acme-"+hex.EncodeToString(b[:]), "other-"+hex.EncodeToString(b[:])
	upload := func(ctx context.Context, tenant, do string) Request {
		h := http.Header{"X-Tenant": {tenant}}
		if do != "" {
			h.Set(doHeader, do)
		}
		return Request{Method: "POST", Path: "/upload", Header: h, RemoteAddr: DefaultRemoteAddr, Context: ctx}
	}
	step := 0
	send := func(r Request, want Want) {
		t.Helper()
		step++
		check(t, step, Step{Request: r, Want: want}, serve(r))
	}
	// hold sends a request whose handler holds its slot, and returns once
	// it does, with the function that lets it go and returns its answer.
	hold := func(ctx context.Context) (finish func() Response) {
		t.Helper()
		step++
		done := make(chan Response, 1)
		go func() { done <- serve(upload(ctx, acme, "hold")) }()
		var free chan struct{}
		select {
		case free = <-entered:
		case res := <-done:
			t.Fatalf("step %d: a request to hold in the handler was answered %d (body %q) before reaching it", step, res.Status, res.Body)
		case <-time.After(concurrencyWait):
			t.Fatalf("step %d: a request to hold in the handler did not reach it within %v", step, concurrencyWait)
		}
		return func() Response {
			t.Helper()
			close(free)
			select {
			case res := <-done:
				return res
			case <-time.After(concurrencyWait):
				t.Fatalf("step %d: no answer within %v of the handler's return", step, concurrencyWait)
			}
			return Response{}
		}
	}
	ok := Want{Status: 200, Body: OK}
	refused := Want{
		Status: 429,
		Header: map[string]string{
			"Retry-After":           "1",
			"X-RateLimit-Limit":     "1",
			"X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset":     "1",
			"RateLimit-Policy":      `"rate";q=1000;w=60, "uploads";q=1;qu="concurrent-requests"`,
			"RateLimit":             `"uploads";r=0`,
		},
		ContentType: problemJSON,
		Body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,` +
			`"detail":"Too many requests in flight; retry after 1 s.","violated-policies":["uploads"]}`,
	}
	bg := context.Background()

	finish := hold(bg)
	send(upload(bg, acme, ""), refused)
	send(upload(bg, other, ""), ok)
	if res := finish(); res.Status != 200 || res.Body != OK {
		t.Errorf("the held request: %d %q, want 200 %q", res.Status, res.Body, OK)
	}
	send(upload(bg, acme, ""), ok) // the held request gave its slot back

	send(upload(bg, acme, "panic"), Want{Status: 500})
	send(upload(bg, acme, ""), ok) // and so did the one that panicked

	ctx, hangUp := context.WithCancel(bg)
	finish = hold(ctx)
	hangUp()
	_ = finish() // the client is gone: whatever the answer, nobody reads it
	send(upload(bg, acme, ""), ok)

	// Concurrent requests of one tenant: each is admitted or refused, and
	// no two run the handler at once.
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		counts = map[int]int{}
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := serve(upload(bg, acme, "count"))
			mu.Lock()
			counts[res.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if counts[200] == 0 || counts[200]+counts[429] != 8 || most.Load() != 1 {
		t.Errorf("8 concurrent requests: statuses %v, at most %d in the handler at once; want 200s and 429s, at least one 200, and 1 at once",
			counts, most.Load())
	}
	send(upload(bg, acme, ""), ok)
}
