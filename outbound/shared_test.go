package outbound

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/redistest"
)

// policyUpstream is a fake upstream on loopback that announces the
// RateLimit-Policy field it is told to, on every response.
type policyUpstream struct {
	srv    *httptest.Server
	policy atomic.Pointer[string]
}

func newPolicyUpstream(t *testing.T, policy string) *policyUpstream {
	u := &policyUpstream{}
	u.policy.Store(&policy)
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("RateLimit-Policy", *u.policy.Load())
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// call sends one call through c, over b, and fails the test unless it
// was sent: it first refills key's bucket (the limit learned before may
// hold the next call back for a long while).
func (u *policyUpstream) call(t *testing.T, b *Budget, c *http.Client, key string) {
	t.Helper()
	if err := b.rule(key).Reset(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(u.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
}

// TestLearnedLimitIsFleetWide: three replicas, each its own limiter and
// client, on one redis-server. Replica 0 alone calls an upstream that
// announces a policy; replicas 1 and 2, which never saw it, decide under
// the lowered limit once they read the shared set (Sync: no sleeping),
// and refuse a call, since replica 0 took the lowered bucket's burst. A
// policy announced later is re-learned (lower or higher, never above the
// configured limit); one at or above the configured limit removes the
// entry; an entry written above the configured limit by anyone never
// raises it; and after Redis forgets the set, the next response re-learns
// it.
func TestLearnedLimitIsFleetWide(t *testing.T) {
	configured := core.Limit{Rate: 100, Period: time.Minute, Burst: 100}
	addr, prefix, lims := fleetOn(t, 3)
	up := newPolicyUpstream(t, `"x";q=10;w=60`)
	budgets, clients := replicas(t, lims, configured, WithFailFast(true), WithLeases(false))
	key := "host:" + up.srv.Listener.Addr().String()
	ctx := context.Background()
	sync := func() {
		t.Helper()
		for _, b := range budgets {
			if err := b.shared.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := func(step string, w core.Limit, on ...int) {
		t.Helper()
		for _, i := range on {
			if got := budgets[i].Limit(key); got != w {
				t.Errorf("%s: replica %d decides under %v, want %v", step, i, got, w)
			}
		}
	}
	ten := policyLimit(10, 60)

	for i, b := range budgets[1:] {
		if got := b.Limit(key); got != configured {
			t.Fatalf("replica %d starts under %v, want the configured %v", i+1, got, configured)
		}
	}
	up.call(t, budgets[0], clients[0], key)
	sync()
	want("learned by replica 0", ten, 0, 1, 2)
	if err := budgets[2].Take(ctx, key); err == nil {
		t.Error("replica 2, which never saw the policy, took a call from a bucket replica 0 emptied")
	}

	up.policy.Store(ptr(`"x";q=50;w=60`))
	up.call(t, budgets[1], clients[1], key)
	sync()
	want("re-learned higher by replica 1", policyLimit(50, 60), 1, 2)

	up.policy.Store(ptr(`"x";q=1000000;w=60`))
	up.call(t, budgets[1], clients[1], key)
	sync()
	want("announced above the configured", configured, 1, 2)

	// Anyone may write the set; an entry above the configured limit is no
	// reason to raise it.
	set, err := overrides.New(lims[0], sharedName("api"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = set.Close() })
	if err := set.Set(ctx, key, overrides.Override{Limits: []core.Limit{{Rate: 1000, Period: time.Second, Burst: 1000}}}); err != nil {
		t.Fatal(err)
	}
	sync()
	want("hostile entry", configured, 2)
	if err := set.Remove(ctx, key); err != nil {
		t.Fatal(err)
	}

	// Redis forgets the set (an eviction, a restart without persistence):
	// replicas that never saw the policy go back to the configured limit
	// until the next response re-learns it.
	up.policy.Store(ptr(`"x";q=10;w=60`))
	up.call(t, budgets[0], clients[0], key)
	sync()
	want("learned again", ten, 2)
	rdb := redistest.NewClient(t, addr)
	if err := rdb.Del(ctx, prefix+"{ovr:"+sharedName("api")+"}", prefix+"{ovr:"+sharedName("api")+"}v").Err(); err != nil {
		t.Fatal(err)
	}
	sync()
	want("forgotten", configured, 2)
	want("forgotten, learned here", ten, 0)
	up.call(t, budgets[0], clients[0], key)
	sync()
	want("re-learned after the loss", ten, 1, 2)
}

func ptr(s string) *string { return &s }
