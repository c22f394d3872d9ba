package overrides

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/testkit"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, in, want string
		limits         int
		err            bool
	}{
		{name: "allow", in: " Allow ", want: "allow"},
		{name: "deny", in: "DENY", want: "deny"},
		{name: "one limit", in: "600/1m burst 600", want: "600/m", limits: 1},
		{name: "burst", in: "600/m burst 60", want: "600/m burst 60", limits: 1},
		{name: "two limits", in: "10/s; 1000/h name hourly", want: "10/s; 1000/h name hourly", limits: 2},
		{name: "quoted name with semicolon", in: `5/m name "a;b"`, err: true},
		{name: "empty", in: " ", err: true},
		{name: "bad limit", in: "0/m", err: true},
		{name: "trailing separator", in: "5/m;", err: true},
		{name: "nine limits", in: strings.Repeat("1/s; ", 8) + "1/s", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Parse(tt.in)
			if tt.err {
				if !errors.Is(err, core.ErrInvalidLimit) {
					t.Fatalf("Parse(%q) = %v, %v, want an error wrapping core.ErrInvalidLimit", tt.in, o, err)
				}
				return
			}
			if err != nil || o.String() != tt.want || len(o.Limits) != tt.limits {
				t.Fatalf("Parse(%q) = %q (%d limits), %v, want %q (%d limits)", tt.in, o, len(o.Limits), err, tt.want, tt.limits)
			}
			back, err := Parse(o.String())
			if err != nil || back.String() != o.String() {
				t.Fatalf("Parse(%q) = %q, %v: does not read back", o.String(), back, err)
			}
		})
	}
	if s := (Override{Allow: true, Deny: true}).String(); s != "invalid override" {
		t.Errorf("String of allow and deny = %q", s)
	}
}

func TestOverridesMemory(t *testing.T) {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	ov, err := New(lim, "plans", WithMax(2))
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	ctx := context.Background()
	if err := ov.Set(ctx, "tenant:acme", Override{Limits: []core.Limit{core.PerMinute(50)}}); err != nil {
		t.Fatal(err)
	}
	if o, ok := ov.Lookup("tenant:acme"); !ok || o.String() != "50/m" || ov.Version() != 1 {
		t.Fatalf("Lookup = %v, %v; Version %d, want 50/m at version 1", o, ok, ov.Version())
	}
	if err := ov.Set(ctx, "tenant:evil", Override{Deny: true}); err != nil {
		t.Fatal(err)
	}
	if err := ov.Set(ctx, "tenant:third", Override{Allow: true}); err == nil || !strings.Contains(err.Error(), "WithMax") {
		t.Fatalf("Set beyond the max = %v, want an error naming WithMax", err)
	}
	if err := ov.Set(ctx, "tenant:acme", Override{Limits: []core.Limit{core.PerMinute(5)}}); err != nil {
		t.Fatalf("Set of a present key in a full set = %v", err)
	}
	if err := ov.Set(ctx, "x", Override{}); !errors.Is(err, core.ErrInvalidLimit) {
		t.Fatalf("Set of an empty override = %v, want core.ErrInvalidLimit", err)
	}
	if err := ov.Set(ctx, "", Override{Allow: true}); err == nil {
		t.Fatal("Set of an empty key: no error")
	}
	if err := ov.Set(ctx, strings.Repeat("k", 1025), Override{Allow: true}); err == nil {
		t.Fatal("Set of a 1025-byte key: no error")
	}
	if err := ov.Remove(ctx, "tenant:acme"); err != nil {
		t.Fatal(err)
	}
	m, err := ov.List(ctx)
	if err != nil || len(m) != 1 || !m["tenant:evil"].Deny {
		t.Fatalf("List = %v, %v, want only tenant:evil deny", m, err)
	}
	if ov.Version() != 4 || ov.Len() != 1 {
		t.Fatalf("Version, Len = %d, %d, want 4, 1", ov.Version(), ov.Len())
	}
}

func TestNewErrors(t *testing.T) {
	lim, _ := core.NewMemory()
	for _, tt := range []struct {
		name string
		set  string
		opts []Option
	}{
		{"empty name", "", nil},
		{"brace", "a{b}", nil},
		{"long name", strings.Repeat("n", 65), nil},
		{"fast refresh", "p", []Option{WithRefresh(time.Millisecond)}},
		{"zero max", "p", []Option{WithMax(0)}},
		{"nil option", "p", []Option{nil}},
	} {
		if _, err := New(lim, tt.set, tt.opts...); err == nil {
			t.Errorf("%s: New = nil error", tt.name)
		}
	}
	if _, err := New(nil, "p"); err == nil {
		t.Error("New(nil) = nil error")
	}
}

// TestOverridesAcrossReplicas sets an override through one limiter and
// watches a second one, with its own client, apply it on a real Redis
// within the refresh interval plus a round trip (bounded generously here:
// the machine may be busy); then removes it; then keeps the last set while
// Redis is down, and reads the emptied set once Redis is back.
func TestOverridesAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("ovrtest:%d:", time.Now().UnixNano())
	quiet := core.WithLogger(slog.New(slog.DiscardHandler))
	a := newLimiter(t, srv.Addr(), core.WithPrefix(prefix), core.WithTimeout(time.Second), quiet)
	b := newLimiter(t, srv.Addr(), core.WithPrefix(prefix), core.WithTimeout(time.Second), quiet)
	const refresh = 20 * time.Millisecond
	ova, err := New(a, "plans", WithRefresh(refresh))
	if err != nil {
		t.Fatal(err)
	}
	defer ova.Close()
	ovb, err := New(b, "plans", WithRefresh(refresh))
	if err != nil {
		t.Fatal(err)
	}
	defer ovb.Close()
	ctx := context.Background()
	if err := ovb.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	o, _ := Parse("50/m; 1000/h")
	if err := ova.Set(ctx, "tenant:acme", o); err != nil {
		t.Fatal(err)
	}
	if got, ok := ova.Lookup("tenant:acme"); !ok || got.String() != o.String() {
		t.Fatalf("setter's Lookup = %v, %v right after Set, want %v", got, ok, o)
	}
	took := testkit.WaitFor(t, 10*time.Second, "the other replica applies the override", func() bool {
		got, ok := ovb.Lookup("tenant:acme")
		return ok && got.String() == "50/m; 1000/h"
	})
	t.Logf("applied on the other replica after %s (refresh %s)", took, refresh)
	if ovb.Version() != ova.Version() {
		t.Fatalf("versions %d and %d differ", ovb.Version(), ova.Version())
	}

	// The limits decide on the second replica.
	got, _ := ovb.Lookup("tenant:acme")
	res, err := b.Allow(ctx, "tenant:acme", got.Limits...)
	if err != nil || !res.Allowed || res.Limit.Rate != 50 {
		t.Fatalf("Allow under the override = %+v, %v", res, err)
	}

	if err := ova.Set(ctx, "tenant:evil", Override{Deny: true}); err != nil {
		t.Fatal(err)
	}
	if err := ova.Remove(ctx, "tenant:acme"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the other replica applies the removal", func() bool {
		_, acme := ovb.Lookup("tenant:acme")
		evil, _ := ovb.Lookup("tenant:evil")
		return !acme && evil.Deny
	})
	m, err := ova.List(ctx)
	if err != nil || len(m) != 1 {
		t.Fatalf("List = %v, %v", m, err)
	}

	// Redis down: the last overrides stay in force.
	v := ovb.Version()
	srv.Kill()
	if err := ovb.Sync(ctx); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("Sync with Redis down = %v, want core.ErrUnavailable", err)
	}
	if err := ova.Set(ctx, "tenant:x", Override{Allow: true}); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("Set with Redis down = %v, want core.ErrUnavailable", err)
	}
	testkit.WaitFor(t, 10*time.Second, "the poller notices the outage", ovb.failing.Load)
	if evil, ok := ovb.Lookup("tenant:evil"); !ok || !evil.Deny || ovb.Version() != v {
		t.Fatalf("Lookup with Redis down = %v, %v at version %d, want the last known deny at %d", evil, ok, ovb.Version(), v)
	}
	// Back, empty (no persistence): the set is read again.
	srv.Restart()
	testkit.WaitFor(t, 10*time.Second, "the poller reads the emptied set", func() bool {
		return ovb.Len() == 0 && ovb.Version() == 0 && !ovb.failing.Load()
	})
}

// TestOverridesMaxOnRead reads a set larger than the reader's bound.
func TestOverridesMaxOnRead(t *testing.T) {
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("ovrmax:%d:", time.Now().UnixNano())
	quiet := core.WithLogger(slog.New(slog.DiscardHandler))
	a := newLimiter(t, srv.Addr(), core.WithPrefix(prefix), quiet)
	ova, _ := New(a, "p", WithMax(3))
	defer ova.Close()
	ctx := context.Background()
	for i := range 3 {
		if err := ova.Set(ctx, fmt.Sprint("k", i), Override{Allow: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ova.Set(ctx, "k3", Override{Allow: true}); err == nil || !strings.Contains(err.Error(), "WithMax") {
		t.Fatalf("Set beyond the max = %v", err)
	}
	ovb, _ := New(a, "p", WithMax(2))
	defer ovb.Close()
	// A set larger than this replica's bound is not read (no HGETALL of
	// an oversized hash), and every change to it is refused with the
	// number it holds.
	err := ovb.Sync(ctx)
	if err == nil || !strings.Contains(err.Error(), `set "p" holds 3 entries in Redis, more than the 2 WithMax allows: not read`) || ovb.Len() != 0 {
		t.Fatalf("Sync of a set above the max = %v, Len %d; want the error and nothing read", err, ovb.Len())
	}
	if err := ovb.Set(ctx, "k0", Override{Deny: true}); err == nil || !strings.Contains(err.Error(), "holds 3 entries, more than the 2 WithMax allows; remove 2 first") {
		t.Fatalf("Set of a present key in a set above the max = %v", err)
	}
	if err := ova.Remove(ctx, "k2"); err != nil {
		t.Fatal(err)
	}
	if err := ovb.Set(ctx, "k0", Override{Deny: true}); err != nil {
		t.Fatalf("Set of a present key in a full set = %v", err)
	}
	if err := ovb.Set(ctx, "k9", Override{Deny: true}); err == nil || !strings.Contains(err.Error(), "holds 2 entries, the most WithMax allows") {
		t.Fatalf("Set of a new key in a full set = %v", err)
	}
	if ovb.Len() != 2 {
		t.Fatalf("Len = %d, want 2 once the set fits", ovb.Len())
	}
	// Another set name is another set.
	ovc, _ := New(a, "q")
	defer ovc.Close()
	if err := ovc.Sync(ctx); err != nil || ovc.Len() != 0 {
		t.Fatalf("set q: Len %d, %v", ovc.Len(), err)
	}
}

// TestOverridesNoExtraRoundTrip counts the commands Redis serves for
// decisions while an override set is attached and unchanged: one script
// call per decision, plus one version check per refresh interval.
func TestOverridesNoExtraRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	lim := newLimiter(t, srv.Addr(), core.WithDenyCache(false))
	ov, _ := New(lim, "plans", WithRefresh(time.Hour))
	defer ov.Close()
	ctx := context.Background()
	if err := ov.Set(ctx, "tenant:acme", Override{Limits: []core.Limit{core.PerSecond(1000)}}); err != nil {
		t.Fatal(err)
	}
	admin := redistest.NewClient(t, srv.Addr())
	lim.Allow(ctx, "warm", core.PerSecond(1)) // loads the script
	before, _ := redistest.CommandCalls(ctx, admin)
	const n = 200
	for range n {
		o, ok := ov.Lookup("tenant:acme")
		if !ok {
			t.Fatal("no override")
		}
		if _, err := lim.Allow(ctx, "tenant:acme", o.Limits...); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := redistest.CommandCalls(ctx, admin)
	// Commands a script runs are counted too (TIME, GET, SET): count the
	// script calls, the round trips.
	calls := func(m map[string]int64) int64 { return m["evalsha"] + m["eval"] + m["evalsha_ro"] + m["eval_ro"] }
	if got := calls(after) - calls(before); got != n || after["hgetall"] != before["hgetall"] {
		t.Fatalf("%d decisions cost %d script calls and %d reads of the set (%v -> %v), want %d and 0",
			n, got, after["hgetall"]-before["hgetall"], before, after, n)
	}
}

// BenchmarkOverridesLookup is the request path's cost of an override set:
// one local lookup, hit or miss.
func BenchmarkOverridesLookup(b *testing.B) {
	lim, _ := core.NewMemory()
	ov, _ := New(lim, "plans")
	defer ov.Close()
	ctx := context.Background()
	for i := range 10_000 {
		if err := ov.Set(ctx, fmt.Sprint("tenant:", i), Override{Limits: []core.Limit{core.PerMinute(100 + i)}}); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct{ name, key string }{{"hit", "tenant:4242"}, {"miss", "tenant:none"}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ov.Lookup(bc.key)
			}
		})
	}
}

// BenchmarkDecisionWithOverrides decides on a private redis-server with an
// override set attached (refresh 1s, the default) and without, and reports
// the script calls (round trips) Redis served, read from INFO
// commandstats: one per decision, plus, in the whole run, the set's
// version checks (one per second, in the background) and no reload.
func BenchmarkDecisionWithOverrides(b *testing.B) {
	for _, attached := range []bool{false, true} {
		b.Run(fmt.Sprintf("overrides=%v", attached), func(b *testing.B) {
			srv := redistest.Start(b)
			rdb := redistest.NewClient(b, srv.Addr())
			lim, err := core.New(rdb, core.WithDenyCache(false))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			limit := []core.Limit{core.PerSecond(1 << 30)}
			var ov *Set
			if attached {
				ov, _ = New(lim, "plans")
				defer ov.Close()
				if err := ov.Set(ctx, "tenant:7", Override{Limits: []core.Limit{core.PerSecond(1 << 29)}}); err != nil {
					b.Fatal(err)
				}
			}
			admin := redistest.NewClient(b, srv.Addr())
			lim.Allow(ctx, "warm", limit...)
			before, _ := redistest.CommandCalls(ctx, admin)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				key := "tenant:" + strconv.Itoa(i&1023)
				ls := limit
				if ov != nil {
					if o, ok := ov.Lookup(key); ok && len(o.Limits) > 0 {
						ls = o.Limits
					}
				}
				if _, err := lim.Allow(ctx, key, ls...); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after, _ := redistest.CommandCalls(ctx, admin)
			scripts := func(m map[string]int64) int64 { return m["evalsha"] + m["eval"] }
			// The set's own script calls (a version check per refresh) are
			// among the scripts: report them apart, as the calls beyond one
			// per decision, in the whole run.
			n := scripts(after) - scripts(before)
			b.ReportMetric(float64(n)/float64(i), "scripts/op")
			b.ReportMetric(float64(n-int64(i)), "extra-scripts")
			b.ReportMetric(float64(after["hgetall"]-before["hgetall"]), "reloads")
		})
	}
}

// TestOverridesEntries checks that allow and deny entries no request could
// match are refused, as WithAllow, WithDeny and the sluice command refuse
// them, on both kinds of limiter.
func TestOverridesEntries(t *testing.T) {
	srv := redistest.Start(t)
	mem, _ := core.NewMemory()
	for _, lim := range []*core.Limiter{mem, newLimiter(t, srv.Addr())} {
		ov, _ := New(lim, "lists")
		defer ov.Close()
		ctx := context.Background()
		for _, tt := range []struct {
			key string
			o   Override
			err string // "" for none
		}{
			{"300.1.2.3", Override{Deny: true}, `overrides: set "lists": keyfunc: list entry "300.1.2.3" is not a valid IP address`},
			{"10.0.0.0/33", Override{Allow: true}, `list entry "10.0.0.0/33" is not a valid CIDR prefix`},
			{"2001:db8::/129", Override{Deny: true}, `the length "129" is not a number from 0 to 128`},
			{"10.0.0.0/8", Override{Allow: true}, ""},
			{"2001:db8::1", Override{Deny: true}, ""},
			{"tenant:a:b", Override{Deny: true}, ""},
			// A limit's key is a key: it is not read as an address.
			{"300.1.2.3", Override{Limits: []core.Limit{core.PerSecond(1)}}, ""},
		} {
			err := ov.Set(ctx, tt.key, tt.o)
			if (tt.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Set(%q, %v) = %v, want %q", tt.key, tt.o, err, tt.err)
			}
		}
		if ov.Len() != 4 {
			t.Errorf("Len = %d, want the 4 valid entries", ov.Len())
		}
	}
}

// TestOverridesBudget checks that Set, Remove and Sync keep a time budget
// against a Redis that swallows every command: the limiter's and at least
// a second for a change (an operator's write on a busy machine must not
// fail at a request's budget), the poller's (the refresh interval, at least
// one second) for a read, and the caller's deadline when it is shorter.
func TestOverridesBudget(t *testing.T) {
	srv := redistest.Start(t)
	px := redistest.NewProxy(t, srv.Addr())
	const budget = 100 * time.Millisecond
	lim := newLimiter(t, px.Addr(), core.WithTimeout(budget), core.WithLogger(slog.New(slog.DiscardHandler)))
	ov, _ := New(lim, "p", WithRefresh(10*time.Millisecond))
	defer ov.Close()
	ctx := context.Background()
	if err := ov.Set(ctx, "tenant:a", Override{Deny: true}); err != nil {
		t.Fatal(err)
	}
	px.SetBlackhole(true)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	for _, tt := range []struct {
		name string
		ctx  context.Context
		call func(context.Context) error
		want error
		min  time.Duration
		max  time.Duration // generous: the machine may be busy
	}{
		{"Set", ctx, func(ctx context.Context) error { return ov.Set(ctx, "tenant:b", Override{Deny: true}) }, core.ErrUnavailable, time.Second, 3 * time.Second},
		{"Remove", ctx, func(ctx context.Context) error { return ov.Remove(ctx, "tenant:a") }, core.ErrUnavailable, time.Second, 3 * time.Second},
		{"Sync", ctx, ov.Sync, core.ErrUnavailable, time.Second, 3 * time.Second},
		{"List", ctx, func(ctx context.Context) error { _, err := ov.List(ctx); return err }, core.ErrUnavailable, time.Second, 3 * time.Second},
		{"Remove, shorter caller", short, func(ctx context.Context) error { return ov.Remove(ctx, "tenant:a") }, context.DeadlineExceeded, 0, 5 * budget},
	} {
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- tt.call(tt.ctx) }()
		select {
		case err := <-done:
			if took := time.Since(start); !errors.Is(err, tt.want) || took < tt.min || took > tt.max {
				t.Errorf("%s against a hung Redis = %v after %v, want %v after %v to %v", tt.name, err, took, tt.want, tt.min, tt.max)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s against a hung Redis: no answer after 30s", tt.name)
		}
	}
	if o, ok := ov.Lookup("tenant:a"); !ok || !o.Deny {
		t.Errorf("Lookup after the failures = %v, %v; want the last set read", o, ok)
	}
}

// TestOverridesVersionCannotGoBack: replica B has read version 1 of a set
// (one entry); Redis restarts empty and replica A writes another entry,
// which is version 1 again. B reads the new set, without the lost entry:
// the version carries the set's epoch, which a new history changes. A
// set that is lost and not written again is read as lost (empty), and
// the loss is logged.
func TestOverridesVersionCannotGoBack(t *testing.T) {
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("ovraba:%d:", time.Now().UnixNano())
	logs := &testkit.SyncBuffer{}
	a := newLimiter(t, srv.Addr(), core.WithPrefix(prefix), core.WithTimeout(time.Second), core.WithLogger(quietLogger()))
	b := newLimiter(t, srv.Addr(), core.WithPrefix(prefix), core.WithTimeout(time.Second), core.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	ova, err := New(a, "plans", WithRefresh(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer ova.Close()
	ovb, err := New(b, "plans", WithRefresh(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer ovb.Close()
	ctx := context.Background()
	if err := ova.Set(ctx, "tenant:lost", Override{Deny: true}); err != nil {
		t.Fatal(err)
	}
	if err := ovb.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := ovb.Lookup("tenant:lost"); !ok || ovb.Version() != 1 {
		t.Fatalf("B before the restart: tenant:lost %v at version %d, want it at 1", ok, ovb.Version())
	}

	srv.Kill()
	srv.Restart() // empty: no persistence
	testkit.WaitFor(t, 10*time.Second, "Redis answers again", func() bool {
		return redistest.NewClient(t, srv.Addr()).Ping(ctx).Err() == nil
	})
	if err := ova.Set(ctx, "tenant:new", Override{Allow: true}); err != nil {
		t.Fatal(err)
	}
	if ova.Version() != 1 {
		t.Fatalf("A's version after the restart = %d, want 1 again (the counter restarted)", ova.Version())
	}
	if err := ovb.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	_, lost := ovb.Lookup("tenant:lost")
	_, fresh := ovb.Lookup("tenant:new")
	if lost || !fresh {
		t.Fatalf("B after the restart: the lost entry %v, the new one %v; want only the new one", lost, fresh)
	}
	if !strings.Contains(logs.String(), "gone from Redis") {
		t.Errorf("B did not log that the set it knew was lost; log:\n%s", logs.String())
	}

	// Lost and not written again: B reads it as lost.
	srv.Kill()
	srv.Restart()
	testkit.WaitFor(t, 10*time.Second, "B reads the lost set", func() bool {
		return ovb.Sync(ctx) == nil && ovb.Len() == 0
	})
}

// newLimiter returns a limiter on a fresh client to addr with a prefix
// private to the test, a time budget far above any scheduling delay, and
// a fixed fallback share (no fleet heartbeat among the calls counted).
func newLimiter(t *testing.T, addr string, opts ...core.Option) *core.Limiter {
	t.Helper()
	rdb := redistest.NewClient(t, addr)
	opts = append([]core.Option{
		core.WithPrefix(fmt.Sprintf("sluicetest:%s:%d:", t.Name(), time.Now().UnixNano())),
		core.WithTimeout(10 * time.Second),
		core.WithFallbackReplicas(1),
	}, opts...)
	lim, err := core.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	return lim
}

// quietLogger discards every line.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
