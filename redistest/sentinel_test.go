package redistest

import (
	"slices"
	"testing"
	"time"
)

// TestSentinel starts a Sentinel deployment, writes through the failover
// client, fails the master over and writes again.
func TestSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five redis-server processes")
	}
	ctx := t.Context()
	start := time.Now()
	s := StartSentinel(t)
	t.Logf("sentinel deployment ready in %v", time.Since(start))
	if got := len(s.SentinelAddrs()); got != 3 {
		t.Fatalf("len(SentinelAddrs()) = %d, want 3", got)
	}
	if s.MasterName() == "" {
		t.Fatal("MasterName() is empty")
	}
	old := s.Master()
	if old != s.Addrs()[0] {
		t.Fatalf("Master() = %s, want the first data node %s", old, s.Addrs()[0])
	}
	if s.Server(old) == nil || s.Server(s.SentinelAddrs()[0]) == nil || s.Server("127.0.0.1:1") != nil {
		t.Fatal("Server() does not find the processes by address")
	}

	rdb := s.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("Set(k) = %v", err)
	}
	if err := rdb.Do(ctx, "WAIT", 1, 1000).Err(); err != nil {
		t.Fatalf("WAIT = %v", err)
	}

	start = time.Now()
	promoted := s.Failover()
	t.Logf("failover from %s to %s took %v", old, promoted, time.Since(start))
	if promoted == old || !slices.Contains(s.Addrs(), promoted) {
		t.Fatalf("Failover() = %s, want the replica (data nodes %v, old master %s)", promoted, s.Addrs(), old)
	}
	if got := s.Master(); got != promoted {
		t.Fatalf("Master() after Failover = %s, want %s", got, promoted)
	}
	// The client follows the failover: the replicated key is there, and
	// writes go to the new master.
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := rdb.Set(ctx, "k2", "v", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Set(k2) after Failover = %v", err)
		}
		<-tick.C
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("Get(k) after Failover = %q, %v, want v", got, err)
	}
	if n, err := s.client(promoted).Exists(ctx, "k2").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS k2 on the new master %s = %d, %v, want 1", promoted, n, err)
	}
}
