package policy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestDryRunTransparent: under WithDryRun a request that would be denied,
// delayed or failed goes on at once with no rate-limit field, and the
// handler is told what would have happened.
func TestDryRunTransparent(t *testing.T) {
	memory := func(t *testing.T) *core.Limiter {
		lim, err := core.NewMemory(core.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	down := func(t *testing.T) *core.Limiter {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		lim, err := core.New(rdb, core.WithFailurePolicy(core.FailClosed), core.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	tests := []struct {
		name    string
		limiter func(*testing.T) *core.Limiter
		limit   core.Limit
		key     keyfunc.Func
		opts    []opt
		want    func(DryRunReport) bool // the last report
	}{
		{"would deny", memory, core.PerMinute(1), keyfunc.Static("k"), nil,
			func(r DryRunReport) bool {
				return r.Key == "static:k" && !r.Result.Allowed && r.Result.DryRun && r.Err == nil
			}},
		{"would wait", memory, core.PerMinute(1), keyfunc.Static("k"), []opt{WithWait[req, struct{}](time.Hour)},
			func(r DryRunReport) bool { return !r.Result.Allowed && r.Result.DryRun }},
		{"no key", memory, core.PerMinute(1), keyfunc.Tenant("X-Tenant"), nil,
			func(r DryRunReport) bool { return errors.Is(r.Err, keyfunc.ErrNoKey) && r.Key == "" }},
		{"bad cost", memory, core.PerMinute(1), keyfunc.Static("k"), []opt{WithCost[req, struct{}](func(req) int { return 0 })},
			func(r DryRunReport) bool { return errors.Is(r.Err, core.ErrInvalidLimit) && r.Key == "static:k" }},
		{"store down under FailClosed", down, core.PerMinute(1), keyfunc.Static("k"), nil,
			func(r DryRunReport) bool { return errors.Is(r.Err, core.ErrUnavailable) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				mu      sync.Mutex
				reports []DryRunReport
			)
			handler := WithDryRunHandler[req, struct{}](func(_ req, r DryRunReport) {
				mu.Lock()
				reports = append(reports, r)
				mu.Unlock()
			})
			opts := append([]opt{WithDryRun[req, struct{}](true), handler}, tt.opts...)
			p, _, err := New(tt.limiter(t), tt.limit, tt.key, self, opts...)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				start := time.Now()
				v := p.Decide(context.Background(), fakeReq{})
				if v.Action != Continue || len(headersOf(v)) != 0 {
					t.Fatalf("request %d: %+v with fields %v; want Continue and no field", i+1, v, headersOf(v))
				}
				if took := time.Since(start); took > 10*time.Second {
					t.Fatalf("request %d took %v: a dry run must not wait", i+1, took)
				}
			}
			if len(reports) != 3 || !tt.want(reports[2]) {
				t.Errorf("reports %+v; the last is not what was expected", reports)
			}
		})
	}

	if _, _, err := New(memoryLimiter(t), core.PerMinute(1), keyfunc.Static("k"), self,
		WithDryRunHandler[req, struct{}](func(req, DryRunReport) {})); err == nil || !strings.Contains(err.Error(), "WithDryRunHandler without WithDryRun(true)") {
		t.Errorf("a handler without dry run: %v, want an error saying so", err)
	}
}

func memoryLimiter(t *testing.T) *core.Limiter {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	return lim
}
