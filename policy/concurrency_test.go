package policy

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/redistest"
)

// tenant is a request of the tenant named in X-Tenant.
func tenant(name string) fakeReq { return fakeReq{headers: map[string]string{"X-Tenant": name}} }

// TestConcurrencyCap: with a cap of 2, two requests of one key hold slots
// and a third is denied, with the cap's fields, Retry-After 1 and a
// problem body naming the cap; another key has slots of its own; Done
// gives a slot back, once however often it is called.
func TestConcurrencyCap(t *testing.T) {
	ctx := context.Background()
	p := newTestPolicy(t, core.PerMinute(100).WithName("rate"), keyfunc.Tenant("X-Tenant"),
		WithConcurrency[req, struct{}](core.ConcurrencyLimit{Name: "uploads", Max: 2}),
		WithHeaders[req, struct{}](HeadersBoth), WithProblemJSON[req, struct{}](true))
	const policyField = `"rate";q=100;w=60, "uploads";q=2;qu="concurrent-requests"`

	first, second := p.Decide(ctx, tenant("acme")), p.Decide(ctx, tenant("acme"))
	for i, v := range []Verdict{first, second} {
		h := headersOf(v)
		if v.Action != Continue || h["RateLimit-Policy"] != policyField || !strings.HasPrefix(h["RateLimit"], `"rate";r=`) || h["X-RateLimit-Limit"] != "100" {
			t.Fatalf("request %d: %v %v, want Continue with the rate's fields and the cap in RateLimit-Policy", i+1, v.Action, h)
		}
	}

	v := p.Decide(ctx, tenant("acme"))
	want := map[string]string{
		"Retry-After":           "1",
		"X-RateLimit-Limit":     "2",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "1",
		"RateLimit-Policy":      policyField,
		"RateLimit":             `"uploads";r=0`,
	}
	if h := headersOf(v); v.Action != Deny || v.Status != 429 || !maps.Equal(h, want) {
		t.Fatalf("third request: %v %d %v, want Deny 429 %v", v.Action, v.Status, h, want)
	}
	if v.Result.Allowed || v.Result.RetryAfter != time.Second || v.Result.Limit.Name != "rate" {
		t.Errorf("third request's Result = %+v, want the rate's, not Allowed, RetryAfter 1s", v.Result)
	}
	wantBody := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,` +
		`"detail":"Too many requests in flight; retry after 1 s.","violated-policies":["uploads"]}`
	if ct, body := v.Body(); ct != "application/problem+json" || string(body) != wantBody {
		t.Errorf("third request's Body() = %q, %s\nwant %s", ct, body, wantBody)
	}
	v.Done() // a refusal holds nothing

	if v := p.Decide(ctx, tenant("other")); v.Action != Continue {
		t.Fatalf("another tenant: %v, want Continue (slots of its own)", v.Action)
	}

	first.Done()
	first.Done()
	copied := first
	copied.Done()
	if v := p.Decide(ctx, tenant("acme")); v.Action != Continue {
		t.Fatalf("after Done: %v, want Continue", v.Action)
	}
	if v := p.Decide(ctx, tenant("acme")); v.Action != Deny {
		t.Fatalf("after Done three times and a new request: %v, want Deny (Done gives back one slot)", v.Action)
	}
	second.Done()

	var zero Verdict
	zero.Done()
}

// TestConcurrencyCapName: an unnamed cap is named after its Max, and the
// name is a structured-field string.
func TestConcurrencyCapName(t *testing.T) {
	for _, tc := range []struct {
		c    core.ConcurrencyLimit
		want string
	}{
		{core.ConcurrencyLimit{Max: 3}, `"concurrency-3";q=3;qu="concurrent-requests"`},
		{core.ConcurrencyLimit{Name: `up"lo\ads`, Max: 1}, `"up\"lo\\ads";q=1;qu="concurrent-requests"`},
	} {
		if got := capPolicyItem(tc.c); got != tc.want {
			t.Errorf("capPolicyItem(%+v) = %s, want %s", tc.c, got, tc.want)
		}
	}
	p := newTestPolicy(t, core.PerMinute(100), keyfunc.Static("k"),
		WithConcurrency[req, struct{}](core.ConcurrencyLimit{Max: 1}), WithHeaders[req, struct{}](HeadersIETF))
	held := p.Decide(context.Background(), fakeReq{})
	defer held.Done()
	if h := headersOf(p.Decide(context.Background(), fakeReq{})); h["RateLimit"] != `"concurrency-1";r=0` {
		t.Errorf("refusal's RateLimit = %q, want \"concurrency-1\";r=0", h["RateLimit"])
	}
}

// TestConcurrencyInvalid: an invalid cap fails New with an error wrapping
// core.ErrInvalidLimit.
func TestConcurrencyInvalid(t *testing.T) {
	lim, err := core.NewMemory(core.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []core.ConcurrencyLimit{{}, {Max: -1}, {Max: 1, Lease: time.Millisecond}} {
		_, _, err := New(lim, core.PerMinute(1), keyfunc.IP(), self, WithConcurrency[req, struct{}](c))
		if !errors.Is(err, core.ErrInvalidLimit) || !strings.HasPrefix(err.Error(), "WithConcurrency: ") {
			t.Errorf("New(WithConcurrency(%+v)) = %v, want a WithConcurrency error wrapping ErrInvalidLimit", c, err)
		}
	}
}

// TestConcurrencyRateDenialTakesNoSlot: a request the rate limits deny
// takes no slot, and one the cap refuses has spent its rate tokens.
func TestConcurrencyRateDenialTakesNoSlot(t *testing.T) {
	ctx := context.Background()
	p := newTestPolicy(t, core.PerMinute(2), keyfunc.Static("k"), WithConcurrency[req, struct{}](core.ConcurrencyLimit{Max: 1}))
	held := p.Decide(ctx, fakeReq{})
	if held.Action != Continue {
		t.Fatalf("first: %v, want Continue", held.Action)
	}
	if v := p.Decide(ctx, fakeReq{}); v.Action != Deny || v.Result.Remaining != 0 {
		t.Fatalf("second: %v, Remaining %d; want a refusal by the cap that spent the last token", v.Action, v.Result.Remaining)
	}
	held.Done()
	v := p.Decide(ctx, fakeReq{})
	if v.Action != Deny || v.Result.RetryAfter <= time.Second {
		t.Fatalf("third: %v, RetryAfter %v; want the rate's denial", v.Action, v.Result.RetryAfter)
	}
	probe, err := p.cap.acquire(ctx, slotPrefix(unmatched), "static:k")
	if err != nil || !probe.Acquired || probe.InFlight != 1 {
		t.Fatalf("a slot after the rate's denial: %+v, %v; want it taken with 1 in flight (the denied request took none)", probe, err)
	}
	_ = probe.Release(ctx)
}

// TestConcurrencyDryRun: a dry run takes and gives back slots but never
// refuses; the handler is told each request's slots in flight, and a
// would-be refusal as a result not Allowed.
func TestConcurrencyDryRun(t *testing.T) {
	ctx := context.Background()
	var reports []DryRunReport
	p := newTestPolicy(t, core.PerMinute(100), keyfunc.Static("k"),
		WithConcurrency[req, struct{}](core.ConcurrencyLimit{Name: "uploads", Max: 1}),
		WithDryRun[req, struct{}](true),
		WithDryRunHandler[req, struct{}](func(_ req, r DryRunReport) { reports = append(reports, r) }))
	first := p.Decide(ctx, fakeReq{})
	second := p.Decide(ctx, fakeReq{})
	for i, v := range []Verdict{first, second} {
		if v.Action != Continue || len(headersOf(v)) != 0 {
			t.Fatalf("request %d: %v with fields %v, want Continue without fields", i+1, v.Action, headersOf(v))
		}
	}
	second.Done()
	first.Done()
	third := p.Decide(ctx, fakeReq{})
	third.Done()
	if len(reports) != 3 {
		t.Fatalf("%d reports, want 3", len(reports))
	}
	for i, want := range []struct {
		allowed  bool
		inFlight int
	}{{true, 1}, {false, 1}, {true, 1}} {
		r := reports[i]
		if r.Result.Allowed != want.allowed || r.InFlight != want.inFlight || !r.Result.DryRun || r.Err != nil {
			t.Errorf("report %d = %+v, want Allowed %v, InFlight %d, DryRun", i+1, r, want.allowed, want.inFlight)
		}
	}
	if r := reports[1]; r.Result.RetryAfter != time.Second {
		t.Errorf("would-be refusal's RetryAfter = %v, want 1s", r.Result.RetryAfter)
	}
}

// failCap is a go-redis hook that fails every command on the keys of a
// policy's cap, so that the rate limits decide on Redis and the cap finds
// it down.
type failCap struct{ prefix string }

func (failCap) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h failCap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.Contains(s, h.prefix) {
				err := errors.New("test: the cap's store is down")
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}
func (failCap) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// redisPolicy is a policy on a private redis-server, through a proxy, with
// the limiter's log.
func redisPolicy(t *testing.T, limit core.Limit, key keyfunc.Func, copts []core.Option, opts ...opt) (*Policy, *redistest.Proxy, *redis.Client, *lines) {
	t.Helper()
	proxy := redistest.NewProxy(t, redistest.Start(t).Addr())
	rdb := redistest.NewClient(t, proxy.Addr())
	log := &lines{}
	lim, err := core.New(rdb, append([]core.Option{core.WithLogger(slog.New(log))}, copts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	p, _, err := New(lim, limit, key, self, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p, proxy, rdb, log
}

// TestConcurrencyStoreDown: on a real Redis, under FailClosed, a cap whose
// store fails answers 503 like the rate limits (and a dry run lets the
// request go on, telling the handler); under FailOpen it admits.
func TestConcurrencyStoreDown(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		policy core.FailurePolicy
		dryRun bool
		want   Action
		status int
	}{
		{"fail closed", core.FailClosed, false, Fail, 503},
		{"fail closed, dry run", core.FailClosed, true, Continue, 0},
		{"fail open", core.FailOpen, false, Continue, 0},
		{"local fallback", core.FallbackLocal, false, Continue, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reports []DryRunReport
			opts := []opt{WithConcurrency[req, struct{}](core.ConcurrencyLimit{Max: 1})}
			if tc.dryRun {
				opts = append(opts, WithDryRun[req, struct{}](true),
					WithDryRunHandler[req, struct{}](func(_ req, r DryRunReport) { reports = append(reports, r) }))
			}
			p, _, rdb, _ := redisPolicy(t, core.PerMinute(100), keyfunc.Static("k"),
				[]core.Option{core.WithFailurePolicy(tc.policy)}, opts...)
			rdb.AddHook(failCap{slotPrefix("")}) // the buckets of no scope: the default
			v := p.Decide(ctx, fakeReq{})
			defer v.Done()
			if v.Action != tc.want || v.Status != tc.status {
				t.Fatalf("Decide = %v %d (%v), want %v %d", v.Action, v.Status, v.Err, tc.want, tc.status)
			}
			if tc.want == Fail && !errors.Is(v.Err, core.ErrUnavailable) {
				t.Errorf("Err = %v, want ErrUnavailable", v.Err)
			}
			if tc.dryRun && (len(reports) != 1 || !errors.Is(reports[0].Err, core.ErrUnavailable)) {
				t.Errorf("dry-run reports %+v, want one with ErrUnavailable", reports)
			}
		})
	}
}

// TestConcurrencyDoneOutlivesTheRequest: on a real Redis, Done gives the
// slot back after the request's context has ended (the client hung up).
func TestConcurrencyDoneOutlivesTheRequest(t *testing.T) {
	p, _, _, log := redisPolicy(t, core.PerMinute(100), keyfunc.Static("k"), nil,
		WithConcurrency[req, struct{}](core.ConcurrencyLimit{Max: 1}))
	ctx, cancel := context.WithCancel(context.Background())
	v := p.Decide(ctx, fakeReq{})
	if v.Action != Continue {
		t.Fatalf("first: %v (%v), want Continue", v.Action, v.Err)
	}
	if v := p.Decide(context.Background(), fakeReq{}); v.Action != Deny {
		t.Fatalf("second, while the first runs: %v, want Deny", v.Action)
	}
	cancel()
	v.Done()
	next := p.Decide(context.Background(), fakeReq{})
	defer next.Done()
	if next.Action != Continue {
		t.Fatalf("after the first hung up and ended: %v, want Continue (its slot given back)", next.Action)
	}
	if len(log.got) != 0 {
		t.Errorf("logged %q, want nothing", log.got)
	}
}

// TestConcurrencyReleaseFailureLoggedOnce: on a real Redis, releases that
// fail while Redis is down are logged once per middleware.
func TestConcurrencyReleaseFailureLoggedOnce(t *testing.T) {
	ctx := context.Background()
	p, proxy, _, log := redisPolicy(t, core.PerMinute(100), keyfunc.Static("k"), nil,
		WithConcurrency[req, struct{}](core.ConcurrencyLimit{Name: "uploads", Max: 5}))
	var held []Verdict
	for range 3 {
		v := p.Decide(ctx, fakeReq{})
		if v.Action != Continue {
			t.Fatalf("Decide = %v (%v), want Continue", v.Action, v.Err)
		}
		held = append(held, v)
	}
	if err := proxy.SetDown(true); err != nil {
		t.Fatal(err)
	}
	for i := range held {
		held[i].Done()
	}
	var released []string
	log.mu.Lock()
	for _, l := range log.got {
		if strings.Contains(l, "could not be released") {
			released = append(released, l)
		}
	}
	log.mu.Unlock()
	if len(released) != 1 || !strings.Contains(released[0], "cap=uploads max=5") {
		t.Errorf("logged %q, want one line about a release, naming the cap", released)
	}
}
