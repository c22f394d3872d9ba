package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSlot(t *testing.T) {
	tests := []struct {
		key  string
		want int
	}{
		// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
		{"123456789", 12739},
		{"foo", 12182},
		{"{user1000}.following", Slot("user1000")},
		{"foo{}{bar}", Slot("foo{}{bar}")},
		{"foo{{bar}}zap", Slot("{bar")},
		{"foo{bar}{zap}", Slot("bar")},
		{"", 0},
	}
	for _, tt := range tests {
		if got := Slot(tt.key); got != tt.want {
			t.Errorf("Slot(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
}

func TestParseClusterNodes(t *testing.T) {
	text := `07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001,host myself,master - 0 0 1 connected 0-5460 [5461-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail - 0 1426238318243 3 connected 16000 10923-15999 16001-16383`
	v, err := parseClusterNodes(text)
	if err != nil {
		t.Fatalf("parseClusterNodes() = %v", err)
	}
	if got, want := v.slotMap(), "0-5460:e7d1eecc 5461-10922:67ed2db8 10923-15999:292f8b36 16000-16000:292f8b36 16001-16383:292f8b36"; got != want {
		t.Errorf("slotMap() = %q, want %q", got, want)
	}
	if n := v.owner(5461); n == nil || n.addr != "127.0.0.1:30002" {
		t.Errorf("owner(5461) = %+v, want 127.0.0.1:30002", n)
	}
	if n := v.byAddr("127.0.0.1:30003"); n == nil || !n.failed() || n.rangeEnd(10923) != 15999 {
		t.Errorf("byAddr(30003) = %+v, want a failed master serving 10923-15999", n)
	}
	if n := v.byAddr("127.0.0.1:30004"); n == nil || n.isMaster() || n.master != "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca" {
		t.Errorf("byAddr(30004) = %+v, want a replica of e7d1eecc", n)
	}
	if _, err := parseClusterNodes("abc 127.0.0.1:1@2 master - 0 0 1 connected 9-3"); err == nil {
		t.Error("parseClusterNodes(range 9-3) = nil error, want an error")
	}
}

// TestCluster starts a cluster, stores a key through the cluster client,
// checks the slot arithmetic against the server, moves a slot that holds a
// key, fails its master over, and restarts the old master.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six redis-server processes")
	}
	ctx := t.Context()
	start := time.Now()
	c := StartCluster(t)
	t.Logf("cluster ready in %v", time.Since(start))
	if got := len(c.Addrs()); got != 6 {
		t.Fatalf("len(Addrs()) = %d, want 6", got)
	}
	masters := c.Masters()
	if len(masters) != 3 {
		t.Fatalf("Masters() = %v, want 3 masters", masters)
	}
	total := 0
	for _, m := range masters {
		total += len(c.SlotsOf(m))
	}
	if total != SlotCount {
		t.Fatalf("masters serve %d slots, want %d", total, SlotCount)
	}

	rdb := c.Client(t)
	for i := range 20 {
		key := fmt.Sprintf("k%d{t%d}", i, i)
		if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatalf("Set(%s) = %v", key, err)
		}
		got, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil || int(got) != Slot(key) {
			t.Fatalf("CLUSTER KEYSLOT %s = %d, %v, want %d", key, got, err, Slot(key))
		}
	}

	key := "moving{m}"
	slot := Slot(key)
	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("Set(%s) = %v", key, err)
	}
	from := c.MasterOf(slot)
	to := masters[(slices.Index(masters, from)+1)%len(masters)]
	c.MoveSlots(to, slot, slot+1)
	if got := c.MasterOf(slot); got != to {
		t.Fatalf("after MoveSlots, MasterOf(%d) = %s, want %s", slot, got, to)
	}
	if got, err := rdb.Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("Get(%s) after MoveSlots = %q, %v, want v", key, got, err)
	}
	if n, err := c.client(to).ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n != 1 {
		t.Fatalf("COUNTKEYSINSLOT %d on %s = %d, %v, want 1", slot, to, n, err)
	}

	// Make sure the replica has the key, then fail its master over.
	if err := c.client(to).Do(ctx, "WAIT", 1, 1000).Err(); err != nil {
		t.Fatalf("WAIT on %s = %v", to, err)
	}
	killed := c.KillMaster(slot)
	if killed != to {
		t.Fatalf("KillMaster(%d) = %s, want %s", slot, killed, to)
	}
	start = time.Now()
	c.WaitHealthy()
	promoted := c.MasterOf(slot)
	t.Logf("failover of %s to %s took %v", killed, promoted, time.Since(start))
	if promoted == killed || strings.TrimSpace(promoted) == "" {
		t.Fatalf("after failover MasterOf(%d) = %q", slot, promoted)
	}
	if got, err := rdb.Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("Get(%s) after failover = %q, %v, want v", key, got, err)
	}

	// Restarted, the old master keeps its nodes.conf and rejoins as a
	// replica of the node that took over.
	c.Server(killed).Restart()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		v := c.view()
		n, p := v.byAddr(killed), v.byAddr(promoted)
		if n != nil && p != nil && !n.isMaster() && !n.failed() && n.master == p.id {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted %s did not rejoin as a replica of %s:\n%s", killed, promoted, c.report())
		}
		<-tick.C
	}
	c.WaitHealthy()
}

// TestClusterAndSentinelMissingBinaries checks that StartCluster and StartSentinel
// skip without the binaries they need, or fail under CI, before starting
// anything.
func TestClusterAndSentinelMissingBinaries(t *testing.T) {
	server := lookServer(t)
	onlyServer := t.TempDir()
	if err := os.Symlink(server, filepath.Join(onlyServer, "redis-server")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		start   func(testing.TB)
		missing string
	}{
		{"cluster without a server", t.TempDir(), func(tb testing.TB) { StartCluster(tb) }, "redis-server or valkey-server"},
		{"cluster without redis-cli", onlyServer, func(tb testing.TB) { StartCluster(tb) }, "redis-cli"},
		{"sentinel without a server", t.TempDir(), func(tb testing.TB) { StartSentinel(tb) }, "redis-server or valkey-server"},
	}
	for _, tt := range tests {
		for _, ci := range []string{"", "true"} {
			t.Run(tt.name+" CI="+ci, func(t *testing.T) {
				t.Setenv("PATH", tt.path)
				t.Setenv("CI", ci)
				t.Setenv(envServer, "")
				t.Setenv(envCLI, "")
				ft := &fakeTB{TB: t}
				runFake(func() { tt.start(ft) })
				defer ft.runCleanups()
				if ci == "" && !ft.skipped || ci != "" && !ft.failed {
					t.Fatalf("skipped = %v, failed = %v with CI=%q", ft.skipped, ft.failed, ci)
				}
				if want := tt.missing + " not found on PATH"; !strings.Contains(ft.msg, want) {
					t.Errorf("message = %q, want it to contain %q", ft.msg, want)
				}
				if len(ft.cleanups) != 0 {
					t.Errorf("%d cleanups registered, want nothing started", len(ft.cleanups))
				}
			})
		}
	}
}
