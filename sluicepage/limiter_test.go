package sluicepage_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/sluicepage"
)

func memoryLimiter(t *testing.T) *core.Limiter {
	t.Helper()
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	return lim
}

func TestForLimiterRefuses(t *testing.T) {
	lim := memoryLimiter(t)
	plans, err := overrides.New(lim, "plans")
	if err != nil {
		t.Fatal(err)
	}
	defer plans.Close()
	for _, tt := range []struct {
		name string
		lim  *core.Limiter
		opts []sluicepage.SourceOption
		want string
	}{
		{"nil limiter", nil, nil, "nil limiter"},
		{"nil option", lim, []sluicepage.SourceOption{nil}, "option 0 of 1 is nil"},
		{"empty name", lim, []sluicepage.SourceOption{sluicepage.ShowLimits(" ", core.PerSecond(1))}, "empty name"},
		{"no limits", lim, []sluicepage.SourceOption{sluicepage.ShowLimits("api")}, `ShowLimits("api"): no limits`},
		{"invalid limit", lim, []sluicepage.SourceOption{sluicepage.ShowLimits("api", core.Limit{Rate: 1})}, `ShowLimits("api"): core: invalid limit`},
		{"name twice", lim, []sluicepage.SourceOption{
			sluicepage.ShowLimits("api", core.PerSecond(1)), sluicepage.ShowLimits("api", core.PerSecond(2)),
		}, `ShowLimits("api"): name given twice`},
		{"nil set", lim, []sluicepage.SourceOption{sluicepage.ShowOverrides(nil)}, "nil set"},
		{"set twice", lim, []sluicepage.SourceOption{sluicepage.ShowOverrides(plans, plans)}, `set "plans" given twice`},
		{"nil outages", lim, []sluicepage.SourceOption{sluicepage.ShowOutages(nil)}, "nil Outages"},
		{"nil warnings", lim, []sluicepage.SourceOption{sluicepage.ShowWarnings(nil)}, "nil Warnings"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src, err := sluicepage.ForLimiter(tt.lim, tt.opts...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ForLimiter() = %v, %v; want an error naming %q", src, err, tt.want)
			}
		})
	}
}

// TestLimiterSource reads each section of a limiter made by NewMemory.
func TestLimiterSource(t *testing.T) {
	ctx := context.Background()
	lim := memoryLimiter(t)
	plans, err := overrides.New(lim, "plans")
	if err != nil {
		t.Fatal(err)
	}
	defer plans.Close()
	for i := range 150 {
		setOverride(t, plans, fmt.Sprintf("tenant:%03d", 149-i), fmt.Sprintf("%d/m", i+1))
	}
	src, err := sluicepage.ForLimiter(lim,
		sluicepage.ShowLimits("api", core.PerMinute(600)),
		sluicepage.ShowLimits("login", core.PerSecond(2).WithBurst(5), core.PerHour(20)),
		sluicepage.ShowOverrides(plans))
	if err != nil {
		t.Fatal(err)
	}

	limits, err := src.Limits(ctx)
	if err != nil || len(limits) != 2 || limits[0].Name != "api" || limits[1].Name != "login" || len(limits[1].Limits) != 2 {
		t.Fatalf("Limits() = %+v, %v; want api, then login with two limits", limits, err)
	}
	limits[0].Limits[0].Rate = 1 // a copy: the source's own stay
	if again, _ := src.Limits(ctx); again[0].Limits[0].Rate != 600 {
		t.Error("Limits() returned the source's own slice: changing it changed the source")
	}
	if _, err := src.TopTalkers(ctx); !errors.Is(err, sluicepage.ErrNotEnabled) {
		t.Errorf("TopTalkers() error = %v, want ErrNotEnabled", err)
	}
	if _, err := src.Warnings(ctx); !errors.Is(err, sluicepage.ErrNotEnabled) {
		t.Errorf("Warnings() error = %v, want ErrNotEnabled", err)
	}
	if h, err := src.Health(ctx); err != nil || !h.Ready || h.Cause != "" {
		t.Errorf("Health() = %+v, %v; want ready", h, err)
	}
	if n, err := src.FleetSize(ctx); err != nil || n != 0 {
		t.Errorf("FleetSize() = %d, %v; want 0 (no fleet)", n, err)
	}
	sets, err := src.Overrides(ctx)
	if err != nil || len(sets) != 1 {
		t.Fatalf("Overrides() = %+v, %v; want one set", sets, err)
	}
	s := sets[0]
	if s.Name != "plans" || s.Len != 150 || s.Version != 150 || len(s.Entries) != 100 {
		t.Errorf("Overrides()[0]: name %q, len %d, version %d, %d entries; want plans, 150, 150, 100", s.Name, s.Len, s.Version, len(s.Entries))
	}
	if !slices.IsSortedFunc(s.Entries, func(a, b sluicepage.Override) int { return strings.Compare(a.Key, b.Key) }) ||
		s.Entries[0] != (sluicepage.Override{Key: "tenant:000", Value: "150/m"}) {
		t.Errorf("Overrides()[0].Entries are not the first keys in order: %v", s.Entries[:3])
	}
}

// TestLimiterSourceStoreDown: with its Redis gone, the source says the
// store is not ready and why, and the Outages observer shows the node's
// outage until it recovers.
func TestLimiterSourceStoreDown(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	outages := new(sluicepage.Outages)
	lim, err := core.New(redistest.NewClient(t, srv.Addr()), core.WithObserver(outages),
		core.WithTimeout(200*time.Millisecond), core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	src, err := sluicepage.ForLimiter(lim, sluicepage.ShowOutages(outages))
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := src.Health(ctx); !h.Ready || len(h.Outages) != 0 {
		t.Fatalf("Health() with Redis up = %+v, want ready, no outage", h)
	}

	srv.Kill()
	limit := core.PerSecond(1000)
	testkit.WaitFor(t, 30*time.Second, "an outage observed", func() bool {
		_, _ = lim.Allow(ctx, "k", limit)
		return len(outages.Open()) > 0
	})
	h, err := src.Health(ctx)
	if err != nil || h.Ready || !strings.Contains(h.Cause, "refused") {
		t.Errorf("Health() with Redis down = %+v, %v; want not ready, the cause naming a refused connection", h, err)
	}
	if len(h.Outages) != 1 || h.Outages[0].Node != srv.Addr() || h.Outages[0].Err == "" || h.Outages[0].Since.IsZero() {
		t.Errorf("Health().Outages = %+v, want one of node %s, with its error and start", h.Outages, srv.Addr())
	}

	srv.Restart()
	testkit.WaitFor(t, 30*time.Second, "the outage's end observed", func() bool {
		_, _ = lim.Allow(ctx, "k", limit)
		return len(outages.Open()) == 0
	})
	if h, _ := src.Health(ctx); !h.Ready {
		t.Errorf("Health() after Redis came back = %+v, want ready", h)
	}
}

// redisLimiter returns a limiter on a redis-server of its own, with opts.
func redisLimiter(t *testing.T, srv *redistest.Server, opts ...core.Option) *core.Limiter {
	t.Helper()
	lim, err := core.New(redistest.NewClient(t, srv.Addr()), append([]core.Option{core.WithTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	return lim
}

// allowN asks lim n times for key under limits, and returns how many it
// denied.
func allowN(t *testing.T, lim *core.Limiter, key string, n int, limits ...core.Limit) int {
	t.Helper()
	denied := 0
	for range n {
		res, err := lim.Allow(context.Background(), key, limits...)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			denied++
		}
	}
	return denied
}

// TestLimiterSourceTopTalkers reads the top talkers of a limiter on a
// real redis-server: each named limit it decided under, its heaviest keys
// by admitted cost and by denials (named, or by hash without names), up
// to K; none before any decision; "not enabled" without WithTopTalkers.
func TestLimiterSourceTopTalkers(t *testing.T) {
	ctx := context.Background()
	// Hourly: no token comes back while the test runs, however slow.
	api, login := core.PerHour(10).WithName("api"), core.PerHour(3).WithName("login")
	for _, tt := range []struct {
		name     string
		names    bool
		heavy    string // the key heaviest on api
		admitted []string
	}{
		{"names kept", true, "tenant:heavy", []string{"tenant:heavy", "tenant:mid"}},
		{"hashes", false, "#" + core.TopKeyHash("tenant:heavy"), []string{"#" + core.TopKeyHash("tenant:heavy"), "#" + core.TopKeyHash("tenant:mid")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lim := redisLimiter(t, redistest.Start(t), core.WithTopTalkers(core.TopTalkers{K: 2, Names: tt.names}))
			src, err := sluicepage.ForLimiter(lim)
			if err != nil {
				t.Fatal(err)
			}
			if top, err := src.TopTalkers(ctx); err != nil || len(top) != 0 {
				t.Fatalf("TopTalkers() before any decision = %+v, %v; want none", top, err)
			}
			if d := allowN(t, lim, "tenant:heavy", 14, api); d != 4 {
				t.Fatalf("tenant:heavy was denied %d of 14 on 10/h, want 4", d)
			}
			allowN(t, lim, "tenant:mid", 5, api)
			allowN(t, lim, "tenant:light", 1, api)
			allowN(t, lim, "user:bob", 5, login)

			top, err := src.TopTalkers(ctx)
			if err != nil || len(top) != 2 {
				t.Fatalf("TopTalkers() = %+v, %v; want api and login", top, err)
			}
			a := top[0]
			if a.Limit != "api" || a.Admitted != 16 || a.Denied != 4 || a.Since.IsZero() {
				t.Errorf("api: limit %q, admitted %d, denied %d, since %v; want api, 16, 4, a time", a.Limit, a.Admitted, a.Denied, a.Since)
			}
			var keys []string
			for _, k := range a.ByAdmitted {
				keys = append(keys, k.Key)
			}
			if !slices.Equal(keys, tt.admitted) {
				t.Errorf("api by admitted = %v, want %v (K = 2)", keys, tt.admitted)
			}
			if len(a.ByDenied) != 1 || a.ByDenied[0] != (sluicepage.Talker{Key: tt.heavy, Admitted: 10, Denied: 4}) {
				t.Errorf("api by denied = %+v, want %s with 10 admitted, 4 denied", a.ByDenied, tt.heavy)
			}
			if l := top[1]; l.Limit != "login" || l.Admitted != 3 || l.Denied != 2 {
				t.Errorf("login: %+v; want 3 admitted, 2 denied", l)
			}
		})
	}

	t.Run("not enabled", func(t *testing.T) {
		src, err := sluicepage.ForLimiter(memoryLimiter(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.TopTalkers(ctx); !errors.Is(err, sluicepage.ErrNotEnabled) {
			t.Errorf("TopTalkers() without WithTopTalkers: error = %v, want ErrNotEnabled", err)
		}
	})
}

// TestLimiterSourceTopTalkersStoreDown: with its Redis gone, TopTalkers
// returns an error naming the limit within the caller's deadline, and
// with the caller's context ended, that context's error.
func TestLimiterSourceTopTalkersStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	lim := redisLimiter(t, srv, core.WithTopTalkers(core.TopTalkers{}),
		core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	src, err := sluicepage.ForLimiter(lim)
	if err != nil {
		t.Fatal(err)
	}
	allowN(t, lim, "tenant:a", 1, core.PerMinute(10).WithName("api"))
	srv.Kill()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a hang guard
	defer cancel()
	top, err := src.TopTalkers(ctx)
	if err == nil || !strings.Contains(err.Error(), `"api"`) || errors.Is(err, sluicepage.ErrNotEnabled) {
		t.Errorf("TopTalkers() with Redis down = %+v, %v; want an error naming limit \"api\"", top, err)
	}
	if ctx.Err() != nil {
		t.Error("TopTalkers() with Redis down ran until the hang guard's deadline")
	}

	ended, stop := context.WithCancel(context.Background())
	stop()
	if _, err := src.TopTalkers(ended); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `"api"`) {
		t.Errorf("TopTalkers() with an ended context: error = %v, want context.Canceled naming limit \"api\"", err)
	}
}

// TestLimiterSourceWarnings drives a key over a rule's warning threshold
// on one of two replicas sharing a real redis-server: the event shows on
// the page of the replica that raised it, once, and on neither page for
// more crossings in its window; a source without ShowWarnings says "not
// enabled".
func TestLimiterSourceWarnings(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	var w1, w2 sluicepage.Warnings
	lim1 := redisLimiter(t, srv, core.WithThresholdHandler(w1.Record))
	lim2 := redisLimiter(t, srv, core.WithThresholdHandler(w2.Record))
	api := core.PerHour(10).WithName("api") // no token comes back while the test runs
	rule := func(lim *core.Limiter) *core.Rule {
		r, err := lim.Prepare(api)
		if err == nil {
			r, err = r.WithWarning(0.5)
		}
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r1, r2 := rule(lim1), rule(lim2)
	src1, err := sluicepage.ForLimiter(lim1, sluicepage.ShowWarnings(&w1))
	if err != nil {
		t.Fatal(err)
	}
	src2, err := sluicepage.ForLimiter(lim2, sluicepage.ShowWarnings(&w2))
	if err != nil {
		t.Fatal(err)
	}

	for i, r := range []*core.Rule{r2, r2, r2, r2, r1, r1, r2, r1} { // the 5th uses 5 of 10: it crosses, on lim1
		if res, err := r.Allow(ctx, "tenant:a"); err != nil || !res.Allowed {
			t.Fatalf("request %d: %+v, %v; want admitted", i+1, res, err)
		}
	}
	got, err := src1.Warnings(ctx)
	if err != nil || len(got) != 1 {
		t.Fatalf("Warnings() of the replica that crossed = %+v, %v; want one", got, err)
	}
	if g := got[0]; g.Limit != "api" || g.Key != "tenant:a" || g.Threshold != 0.5 || g.Remaining != 5 || !g.Until.After(g.At) {
		t.Errorf("Warnings()[0] = %+v; want api, tenant:a, 0.5, 5 remaining, a window", g)
	}
	if got, err := src2.Warnings(ctx); err != nil || len(got) != 0 {
		t.Errorf("Warnings() of the other replica = %+v, %v; want none: the event is raised once in the fleet", got, err)
	}

	src, err := sluicepage.ForLimiter(lim1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Warnings(ctx); !errors.Is(err, sluicepage.ErrNotEnabled) {
		t.Errorf("Warnings() without ShowWarnings: error = %v, want ErrNotEnabled", err)
	}
}
