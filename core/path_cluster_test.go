package core_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// pathTree is the four levels of the Cluster path tests.
var pathTree = []core.Level{
	{Name: "org", Limits: []core.Limit{core.PerCalendarMonth(1_000_000, "Asia/Tokyo")}},
	{Name: "team", Limits: []core.Limit{core.PerHour(1000)}},
	{Name: "user", Limits: []core.Limit{core.PerMinute(3)}},
	{Name: "key", Limits: []core.Limit{core.PerHour(1000)}},
}

// nodeCount counts path decisions per store node.
type nodeCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *nodeCount) ObserveDecision(core.Result, core.Source) {}
func (c *nodeCount) ObserveStore(s core.StoreCall) {
	if s.Op != core.OpPath {
		return
	}
	c.mu.Lock()
	c.n[s.Node]++
	c.mu.Unlock()
}
func (c *nodeCount) ObserveDegraded(core.StoreOutage)  {}
func (c *nodeCount) ObserveRecovered(core.StoreOutage) {}

// TestClusterPath decides four-level paths of 300 organisations on a real
// Cluster: every decision is one script call, all of a path's buckets
// share the root's slot, every master serves some organisations, and a
// user's denial charges nothing at the organisation.
func TestClusterPath(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t)
	rdb := c.Client(t)
	warmClient(t, rdb)
	prefix := fmt.Sprintf("pathtest%d:", time.Now().UnixNano())
	counts := &nodeCount{n: map[string]int{}}
	lim, err := core.New(rdb, core.WithTimeout(time.Second), core.WithPrefix(prefix), core.WithObserver(counts), core.WithFallbackReplicas(1))
	if err != nil {
		t.Fatal(err)
	}
	r, err := lim.PreparePath("cluster", pathTree...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const orgs = 300
	for o := range orgs {
		path := []string{fmt.Sprintf("org-%d", o), "team", fmt.Sprintf("user-%d", o%7), "key"}
		for i := range 4 {
			res, err := r.Allow(ctx, path...)
			if err != nil || res.Degraded {
				t.Fatalf("%v #%d: %+v, %v", path, i, res, err)
			}
			if want := i < 3; res.Allowed != want || (!want && res.Level != "user") {
				t.Fatalf("%v #%d: %+v; want Allowed %v (a denial by the user level)", path, i, res, want)
			}
		}
		res, err := r.Allow(ctx, path[0])
		if err != nil || res.Remaining != 1_000_000-4 {
			t.Fatalf("%s after 3 admitted and 1 denied: %+v, %v; want Remaining %d", path[0], res, err, 1_000_000-4)
		}
	}
	masters := c.Masters()
	byTag := map[string]map[string]bool{} // tag -> masters holding it
	total := 0
	for _, m := range masters {
		for _, name := range scanMaster(t, m, prefix) {
			tag, _ := hashTag(name)
			if byTag[tag] == nil {
				byTag[tag] = map[string]bool{}
			}
			byTag[tag][m] = true
			if !strings.HasSuffix(name, "~epoch") { // the org level's quota epoch, in its tag (see quota.lua)
				total++
			}
		}
	}
	for tag, ms := range byTag {
		if len(ms) != 1 {
			t.Errorf("tag %s on %d masters, want one", tag, len(ms))
		}
	}
	if total != orgs*4 {
		t.Errorf("%d buckets, want %d: four levels per organisation", total, orgs*4)
	}
	// Concurrent callers: paths of many roots batched per master, one
	// script call per root's tag. Each organisation's user admits exactly
	// 3, whatever the batches.
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := map[string]int{}
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				org := fmt.Sprintf("busy-%d", (g*40+i)%20)
				res, err := r.Allow(ctx, org, "team", "user", "key")
				if err != nil || res.Degraded {
					t.Errorf("%s: %+v, %v", org, res, err)
					return
				}
				if res.Allowed {
					mu.Lock()
					admitted[org]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for org, n := range admitted {
		if n != 3 {
			t.Errorf("%s admitted %d, want its user's 3", org, n)
		}
	}
	if len(admitted) != 20 {
		t.Errorf("%d organisations admitted anything, want 20", len(admitted))
	}
	counts.mu.Lock()
	defer counts.mu.Unlock()
	if len(counts.n) != len(masters) {
		t.Errorf("path decisions went to %d nodes %v, want every one of the %d masters", len(counts.n), counts.n, len(masters))
	}
	t.Logf("%d organisations, %d buckets in %d tags; path calls per master: %v", orgs, total, len(byTag), counts.n)
}

// BenchmarkClusterPathRoots measures four-level path decisions on a real
// Cluster from 16 goroutines, with every path under one organisation (one
// hash tag: one master decides them all) against paths spread over 64
// organisations (every master), and reports the busiest master's share of
// the masters' CPU time (INFO cpu) while they ran: all of it for one
// root, about a third each for many on three masters. (On a small machine
// the masters share its cores, so ns/op says little of a master's
// capacity; the share says where the load goes.) Run it under flock, as
// bench/README.md says: go test -run '^$' -bench ClusterPathRoots ./core
func BenchmarkClusterPathRoots(b *testing.B) {
	c := redistest.StartCluster(b)
	rdb := c.Client(b)
	lim, err := core.New(rdb, core.WithTimeout(time.Second), core.WithPrefix(fmt.Sprintf("pathbench%d:", time.Now().UnixNano())), core.WithFallbackReplicas(1))
	if err != nil {
		b.Fatal(err)
	}
	levels := []core.Level{
		{Name: "org", Limits: []core.Limit{core.PerSecond(1 << 30)}},
		{Name: "team", Limits: []core.Limit{core.PerSecond(1 << 30)}},
		{Name: "user", Limits: []core.Limit{core.PerSecond(1 << 30)}},
		{Name: "key", Limits: []core.Limit{core.PerSecond(1 << 30)}},
	}
	r, err := lim.PreparePath("bench", levels...)
	if err != nil {
		b.Fatal(err)
	}
	for _, roots := range []int{1, 64} {
		b.Run(fmt.Sprintf("roots=%d", roots), func(b *testing.B) {
			ctx := context.Background()
			var next atomic.Int64
			var degraded atomic.Int64
			cpu0 := map[string]float64{}
			for _, m := range c.Masters() {
				cpu0[m] = masterCPU(b, m)
			}
			b.SetParallelism(8) // 16 goroutines on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1)
					path := []string{fmt.Sprintf("org-%d", i%int64(roots)), fmt.Sprintf("team-%d", i%5), fmt.Sprintf("user-%d", i%97), "key"}
					res, err := r.Allow(ctx, path...)
					if err != nil {
						b.Error(err)
						return
					}
					if res.Degraded {
						degraded.Add(1)
					}
				}
			})
			b.StopTimer()
			if n := degraded.Load(); n > 0 {
				b.Logf("%d degraded decisions", n)
			}
			var total, busiest float64
			for _, m := range c.Masters() {
				x := masterCPU(b, m) - cpu0[m]
				total += x
				busiest = max(busiest, x)
			}
			if total > 0 {
				b.ReportMetric(busiest/total, "busiest-master-share")
			}
		})
	}
}

// masterCPU is the CPU time, in seconds, the Redis at addr has used (INFO
// cpu: used_cpu_user plus used_cpu_sys).
func masterCPU(b *testing.B, addr string) float64 {
	info, err := redistest.NewClient(b, addr).Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			x, _ := strconv.ParseFloat(v, 64)
			sum += x
		}
	}
	return sum
}
