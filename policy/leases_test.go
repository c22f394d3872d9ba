package policy

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// leaseCount counts the decisions made from token leases and the tokens
// taken into them.
type leaseCount struct {
	mu        sync.Mutex
	fromLease int
	taken     int64
}

func (o *leaseCount) ObserveDecision(_ core.Result, src core.Source) {
	if src == core.SourceLease {
		o.mu.Lock()
		o.fromLease++
		o.mu.Unlock()
	}
}

func (*leaseCount) ObserveStore(core.StoreCall)                             {}
func (*leaseCount) ObserveDegraded(core.StoreOutage)                        {}
func (*leaseCount) ObserveRecovered(core.StoreOutage)                       {}
func (*leaseCount) ObserveAcquire(core.ConcurrencyLimit, bool, core.Source) {}

func (o *leaseCount) ObserveTokenLease(_ core.Limit, ev core.LeaseEvent) {
	o.mu.Lock()
	o.taken += ev.Taken
	o.mu.Unlock()
}

// TestTokenLeasesMiddleware: a middleware with WithTokenLeases decides a
// hot key from leases on a real Redis (most decisions made in memory),
// never admits past the limit, and another key is decided as before.
func TestTokenLeasesMiddleware(t *testing.T) {
	ctx := context.Background()
	obs := &leaseCount{}
	const burst = 200
	limit := core.Limit{Name: "hot", Rate: 1, Period: time.Hour, Burst: burst}
	p, _, _, _ := redisPolicy(t, limit, keyfunc.Tenant("X-Tenant"), []core.Option{core.WithObserver(obs)},
		WithTokenLeases[req, struct{}](core.LeaseBound{Fraction: 0.25}))
	admitted := 0
	for range 3 * burst {
		v := p.Decide(ctx, tenant("acme"))
		if v.Action == Continue {
			admitted++
		}
		v.Done()
	}
	obs.mu.Lock()
	fromLease, taken := obs.fromLease, obs.taken
	obs.mu.Unlock()
	t.Logf("%d of %d requests admitted (burst %d); %d decided from leases, %d tokens taken into them", admitted, 3*burst, burst, fromLease, taken)
	if admitted > burst {
		t.Fatalf("%d admitted, more than the burst of %d", admitted, burst)
	}
	if admitted < burst-burst/4 {
		t.Errorf("%d admitted, below the burst of %d by more than the bound (%d)", admitted, burst, burst/4)
	}
	if fromLease == 0 || taken == 0 {
		t.Fatalf("no decision came from a lease (%d tokens taken): the option did not reach the engine", taken)
	}
	if v := p.Decide(ctx, tenant("other")); v.Action != Continue {
		t.Fatalf("another key: %v, want Continue", v.Action)
	}
}

// TestTokenLeasesRefused: the constructor names what is wrong with a bad
// bound, a stepped limit, or leases beside WithPath.
func TestTokenLeasesRefused(t *testing.T) {
	p, _, _, _ := redisPolicy(t, core.PerSecond(100), keyfunc.Tenant("X-Tenant"), nil)
	eng := p.lim
	for _, tc := range []struct {
		name  string
		limit core.Limit
		opts  []opt
		want  string
	}{
		{"bound", core.PerSecond(100), []opt{WithTokenLeases[req, struct{}](core.LeaseBound{Fraction: 0.9})}, "Fraction"},
		{"stepped", core.PerInterval(100, time.Hour), []opt{WithTokenLeases[req, struct{}](core.LeaseBound{Tokens: 10})}, "stepped"},
		{"path", core.PerSecond(100), []opt{WithTokenLeases[req, struct{}](core.LeaseBound{Tokens: 10}),
			WithPath[req, struct{}]("org", PathLevel{Name: "user", Key: keyfunc.Header("X-User"), Limits: []core.Limit{core.PerSecond(10)}})}, "WithPath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := New(eng, tc.limit, keyfunc.Tenant("X-Tenant"), self, tc.opts...)
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
