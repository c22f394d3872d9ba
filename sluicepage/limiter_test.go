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
