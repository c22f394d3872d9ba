package core_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// peekCalls counts the store's peek calls per node, as the observer
// reports them: one per round trip.
type peekCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *peekCalls) ObserveDecision(core.Result, core.Source) {}
func (c *peekCalls) ObserveStore(s core.StoreCall) {
	if s.Op == core.OpPeek {
		c.mu.Lock()
		c.n[s.Node]++
		c.mu.Unlock()
	}
}
func (c *peekCalls) ObserveDegraded(core.StoreOutage)  {}
func (c *peekCalls) ObserveRecovered(core.StoreOutage) {}

// tripCount counts what a client sends to each node: every command sent
// alone and every pipeline is one round trip.
type tripCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *tripCount) hook(addr string) redis.Hook { return tripHook{c, addr} }

type tripHook struct {
	c    *tripCount
	addr string
}

func (h tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.c.add(h.addr)
		return next(ctx, cmd)
	}
}
func (h tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.c.add(h.addr)
		return next(ctx, cmds)
	}
}

func (c *tripCount) add(addr string) {
	c.mu.Lock()
	c.n[addr]++
	c.mu.Unlock()
}

// TestClusterPeekMany: on a real Cluster of three masters, PeekMany of 100
// keys (their buckets in slots of every master, half of them held) reads
// each master once: one round trip per master (a pipeline of the script
// calls of its keys' hash tags, as a hook on each node's connection
// counts it, and the observer), one script call per tag as each master's
// INFO commandstats counts them, one GET per key, and nothing written (no SET,
// DEL or PEXPIRE; every master keeps its number of keys). Its results are
// what Peek reports of each key.
func TestClusterPeekMany(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t)
	rdb := c.Client(t)
	trips := &tripCount{n: map[string]int{}}
	rdb.OnNewNode(func(n *redis.Client) { n.AddHook(trips.hook(n.Options().Addr)) })
	warmClient(t, rdb)
	calls := &peekCalls{n: map[string]int{}}
	lim, err := core.New(rdb, core.WithTimeout(2*time.Second), core.WithPrefix(fmt.Sprintf("peektest%d:", time.Now().UnixNano())),
		core.WithObserver(calls), core.WithFallbackReplicas(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	rule, err := lim.Prepare(core.PerMinute(10))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant:%d", i)
		if i%2 == 0 {
			if res, err := rule.AllowN(ctx, keys[i], 3); err != nil || !res.Allowed || res.Degraded {
				t.Fatalf("AllowN(%s) = %+v, %v", keys[i], res, err)
			}
		}
	}
	if _, err := rule.PeekMany(ctx, keys); err != nil { // every master has the script
		t.Fatal(err)
	}
	masters := c.Masters()
	direct := map[string]*redis.Client{}
	before := map[string]map[string]int64{}
	sizes := map[string]int64{}
	for _, m := range masters {
		direct[m] = redistest.NewClient(t, m)
		if before[m], err = redistest.CommandCalls(ctx, direct[m]); err != nil {
			t.Fatal(err)
		}
		sizes[m] = direct[m].DBSize(ctx).Val()
	}
	calls.mu.Lock()
	clear(calls.n)
	calls.mu.Unlock()
	trips.mu.Lock()
	clear(trips.n)
	trips.mu.Unlock()

	got, err := rule.PeekMany(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	trips.mu.Lock()
	sent := maps.Clone(trips.n)
	trips.mu.Unlock()
	for _, m := range masters {
		if sent[m] != 1 {
			t.Errorf("master %s: %d round trips, want 1", m, sent[m])
		}
	}
	if len(sent) != len(masters) {
		t.Errorf("round trips to %v, want one to each of the %d masters", sent, len(masters))
	}

	var evals, gets int64
	for _, m := range masters {
		after, err := redistest.CommandCalls(ctx, direct[m])
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"set", "del", "pexpire", "eval"} {
			if d := after[cmd] - before[m][cmd]; d != 0 {
				t.Errorf("master %s: PeekMany ran %s %d times, want 0", m, cmd, d)
			}
		}
		if n := direct[m].DBSize(ctx).Val(); n != sizes[m] {
			t.Errorf("master %s: PeekMany changed the number of keys from %d to %d", m, sizes[m], n)
		}
		d := after["evalsha"] - before[m]["evalsha"]
		if d == 0 {
			t.Errorf("master %s ran no script: the keys did not span every master", m)
		}
		evals += d
		gets += after["get"] - before[m]["get"]
	}
	if gets != int64(len(keys)) || evals > int64(len(keys)) {
		t.Errorf("PeekMany of %d keys ran %d GETs in %d script calls; want one GET per key, at most a call per key's tag", len(keys), gets, evals)
	}
	calls.mu.Lock()
	for node, n := range calls.n {
		if n != 1 {
			t.Errorf("node %s: %d peek calls (round trips), want 1", node, n)
		}
	}
	if len(calls.n) != len(masters) {
		t.Errorf("peek calls on %d nodes %v, want each of the %d masters once", len(calls.n), calls.n, len(masters))
	}
	t.Logf("PeekMany of %d keys: %d script calls, %d GETs; round trips per master: %v", len(keys), evals, gets, calls.n)
	calls.mu.Unlock()
	for i, k := range keys {
		want, err := rule.Peek(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		want.ResetAfter, got[i].ResetAfter = 0, 0 // Redis's clock moved between the two reads
		want.Time, got[i].Time = time.Time{}, time.Time{}
		if got[i] != want || got[i].Remaining != 10-3*((i+1)%2) {
			t.Errorf("PeekMany(%s) = %+v, Peek = %+v", k, got[i], want)
		}
	}
}

// TestClusterTop: on a real Cluster, two limiters flush the top talkers
// of several limits (their windows' hash tags on different masters) when
// closed, and a third reads each limit's merged counts.
func TestClusterTop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t)
	prefix := fmt.Sprintf("toptest%d:", time.Now().UnixNano())
	newLim := func() *core.Limiter {
		rdb := c.Client(t)
		warmClient(t, rdb)
		lim, err := core.New(rdb, core.WithTimeout(2*time.Second), core.WithPrefix(prefix), core.WithFallbackReplicas(1),
			core.WithTopTalkers(core.TopTalkers{Window: time.Hour}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		return lim
	}
	ctx := context.Background()
	names := []string{"search", "upload", "login", "export", "billing", "admin"}
	for range 2 {
		lim := newLim()
		for i, name := range names {
			for range i + 1 {
				if res, err := lim.Allow(ctx, "tenant:"+name, core.PerHour(100).WithName(name)); err != nil || res.Degraded {
					t.Fatalf("%s: %+v, %v", name, res, err)
				}
			}
		}
		lim.Close()
	}
	reader := newLim()
	masters := map[string]bool{}
	for i, name := range names {
		top, err := reader.Top(ctx, name, 3)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(2 * (i + 1)); top.Admitted != want || len(top.ByAdmitted) != 1 || top.ByAdmitted[0].Admitted != want ||
			top.ByAdmitted[0].Hash != core.TopKeyHash("tenant:"+name) {
			t.Errorf("%s: %+v; want tenant:%s with %d admitted", name, top, name, want)
		}
	}
	for _, m := range c.Masters() {
		if len(scanMaster(t, m, prefix+"{top:")) > 0 {
			masters[m] = true
		}
	}
	if len(masters) < 2 {
		t.Errorf("the windows of %d limits are on %d masters; want them spread", len(names), len(masters))
	}
}
