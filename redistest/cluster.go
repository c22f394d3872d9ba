package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// SlotCount is the number of hash slots in a Redis Cluster.
const SlotCount = 16384

// ClusterNodeTimeout is the --cluster-node-timeout of every node that
// [StartCluster] starts: how long a master may be unreachable before the
// cluster marks it failed and promotes its replica.
const ClusterNodeTimeout = time.Second

const (
	// clusterMasters and clusterReplicas shape the cluster StartCluster
	// builds: one replica per master.
	clusterMasters  = 3
	clusterReplicas = 1
	// clusterWaitTimeout bounds cluster creation, failover and resharding
	// waits.
	clusterWaitTimeout = 30 * time.Second
	// adminTimeout bounds one administrative command.
	adminTimeout = 5 * time.Second
	// clusterPoll is the gap between polls of the cluster's state.
	clusterPoll = 50 * time.Millisecond
	// migrateBatch is how many keys one MIGRATE moves.
	migrateBatch = 100
)

// Cluster is a private Redis Cluster of six redis-server child processes on
// loopback ports: three masters, each with one replica. It is created by
// [StartCluster]; the zero value is not usable.
//
// Every node has its own temporary directory and saves nothing to disk but
// its cluster configuration (nodes.conf), so a node restarted with
// [Server.Restart] rejoins the cluster, empty, as a replica if its slots
// moved on. All nodes are killed when the test ends.
//
// The methods that wait or change the cluster report failure with the Fatal
// method of the testing.TB given to StartCluster, so like Fatal they must be
// called from the goroutine running the test. They are not meant to be
// called concurrently with each other; clients may use the cluster
// meanwhile.
type Cluster struct {
	tb    testing.TB
	cli   string
	nodes []*Server

	mu    sync.Mutex
	admin map[string]*redis.Client // by address, made on first use
}

// StartCluster starts a Redis Cluster of three masters with one replica each
// and returns it once it is ready: every node reports cluster_state:ok, all
// 16384 slots are assigned to the three masters, every node agrees on the
// slot map, and every replica is attached and in sync with its master.
//
// Each node is a server (see "Which server" in the package doc) started as
// by [Start], with
// --cluster-enabled yes, a cluster bus on a second free loopback port,
// --cluster-node-timeout 1000 (see [ClusterNodeTimeout]) and
// --cluster-replica-validity-factor 0, so that a replica always takes over
// from a failed master, and --repl-diskless-sync-delay 0, so that replicas
// sync at once. args are passed to every node after these, for
// example "--cluster-require-full-coverage", "no". The cluster is created by
// the server's own client (redis-cli or valkey-cli) with --cluster create.
//
// When the server or its client is not found, StartCluster calls tb.Skip,
// or tb.Fatal when the environment variable CI is "true" or "1", or when
// SLUICE_REDIS_SERVER or SLUICE_REDIS_CLI names a binary that is not
// there. It calls
// tb.Fatal if the cluster is not ready within about 30 seconds; the message
// includes every node's view of the cluster and the end of its log.
func StartCluster(tb testing.TB, args ...string) *Cluster {
	tb.Helper()
	lookServer(tb)
	c := &Cluster{tb: tb, cli: lookCLI(tb), admin: make(map[string]*redis.Client)}
	args = slices.Clone(args)
	setup := func(_ string, port int) (string, []string, error) {
		bus, err := freePort()
		for err == nil && bus == port {
			bus, err = freePort()
		}
		if err != nil {
			return "", nil, fmt.Errorf("choose a cluster bus port: %w", err)
		}
		return "", append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-replica-validity-factor", "0",
			"--repl-diskless-sync-delay", "0",
		}, args...), nil
	}
	for range clusterMasters * (1 + clusterReplicas) {
		c.nodes = append(c.nodes, startWith(tb, freePort, setup))
	}
	c.create()
	c.wait("the new cluster to be ready", true)
	return c
}

// create joins the nodes into a cluster with redis-cli.
func (c *Cluster) create() {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWaitTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(clusterReplicas), "--cluster-yes")
	cmd := exec.CommandContext(ctx, c.cli, args...)
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.tb.Fatalf("redistest: redis-cli %s: %v\n%s\n%s", shellJoin(args), err, out, c.report())
	}
}

// Addrs returns the address of every node, "127.0.0.1:port", in the order
// they were started. redis-cli makes the first three the masters, but
// failovers and restarts change roles; ask [Cluster.Masters] for the current
// ones. The addresses never change.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Server returns the node at addr, to kill, stop or restart it, or nil if
// no node of the cluster has that address.
func (c *Cluster) Server(addr string) *Server {
	for _, s := range c.nodes {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// Client returns a cluster client for the limiter, closed at tb.Cleanup. It
// does no network I/O and never fails. Its cleanup waits, up to a few
// seconds, until go-redis's background goroutines for it have ended (a pool
// re-dials a dead node once a second and notices Close only then), so that
// goroutine leak checks pass.
//
// Like [NewClient], it is tuned so that failures show up at once: dial, read
// and write timeouts of 1s, context deadlines honoured
// (ContextTimeoutEnabled), one dial attempt per connection, no retries on a
// node (MaxRetries -1) and no maintenance notifications. It keeps go-redis's
// default of 3 redirects (MaxRedirects), which it needs to follow MOVED and
// ASK while slots move, and it reloads the slot map at least every second
// (ClusterStateReloadInterval), since go-redis reloads it only on a redirect
// otherwise and would keep sending a failed master's slots to the dead
// address.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	return c.ClientWith(tb, nil)
}

// ClientWith is [Cluster.Client] with its options changed by edit first (nil
// for none), for a test that needs other settings, such as go-redis's
// defaults.
func (c *Cluster) ClientWith(tb testing.TB, edit func(*redis.ClusterOptions)) *redis.ClusterClient {
	tb.Helper()
	opt := &redis.ClusterOptions{
		Addrs:                      c.Addrs(),
		DialTimeout:                time.Second,
		ReadTimeout:                time.Second,
		WriteTimeout:               time.Second,
		DialerRetries:              1,
		MaxRetries:                 -1,
		ContextTimeoutEnabled:      true,
		ClusterStateReloadInterval: time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	}
	if edit != nil {
		edit(opt)
	}
	rdb := redis.NewClusterClient(opt)
	tb.Cleanup(func() {
		_ = rdb.Close()
		drainGoRedis()
	})
	return rdb
}

// Masters returns the addresses of the masters that serve slots, ordered by
// their lowest slot, as the cluster sees them now.
func (c *Cluster) Masters() []string {
	c.tb.Helper()
	v := c.view()
	var addrs []string
	for _, n := range v.nodes {
		if n.isMaster() && len(n.slots) > 0 {
			addrs = append(addrs, n.addr)
		}
	}
	slices.SortFunc(addrs, func(a, b string) int { return v.byAddr(a).slots[0][0] - v.byAddr(b).slots[0][0] })
	return addrs
}

// MasterOf returns the address of the master serving slot, as the cluster
// sees it now. Use [Slot] to find a key's slot.
func (c *Cluster) MasterOf(slot int) string {
	c.tb.Helper()
	if slot < 0 || slot >= SlotCount {
		c.tb.Fatalf("redistest: MasterOf(%d): no such slot", slot)
	}
	v := c.view()
	if n := v.owner(slot); n != nil {
		return n.addr
	}
	c.tb.Fatalf("redistest: MasterOf(%d): no node serves the slot\n%s", slot, c.report())
	return ""
}

// SlotsOf returns the slots the master at addr serves, in order, as the
// cluster sees it now.
func (c *Cluster) SlotsOf(addr string) []int {
	c.tb.Helper()
	n := c.view().byAddr(addr)
	if n == nil {
		return nil
	}
	var slots []int
	for _, r := range n.slots {
		for s := r[0]; s <= r[1]; s++ {
			slots = append(slots, s)
		}
	}
	return slots
}

// KillMaster sends SIGKILL to the master serving slot and returns its
// address. The cluster marks it failed after about [ClusterNodeTimeout] and
// its replica takes over its slots; [Cluster.WaitHealthy] waits for that.
func (c *Cluster) KillMaster(slot int) string {
	c.tb.Helper()
	addr := c.MasterOf(slot)
	c.Server(addr).Kill()
	return addr
}

// WaitHealthy waits until the cluster serves every slot: every running node
// reports cluster_state:ok, each of the 16384 slots belongs to a running
// master, and all running nodes agree on which. After [Cluster.KillMaster]
// this waits for the failover. It calls Fatal if that takes more than about
// 30 seconds.
func (c *Cluster) WaitHealthy() {
	c.tb.Helper()
	c.wait("the cluster to serve every slot", false)
}

// MoveSlots moves slots, with their keys, to the master at to, one slot at a
// time, the way redis-cli --cluster reshard does: the target imports the
// slot, the owner marks it migrating, MIGRATE moves its keys in batches
// (clients are redirected with ASK meanwhile), and then every master is told
// the slot's new owner. Slots that to already serves are skipped. MoveSlots
// returns once every running node agrees on the new slot map.
func (c *Cluster) MoveSlots(to string, slots ...int) {
	c.tb.Helper()
	v := c.view()
	dst := v.byAddr(to)
	if dst == nil || !dst.isMaster() {
		c.tb.Fatalf("redistest: MoveSlots: %s is not a master of the cluster\n%s", to, c.report())
	}
	var masters []*clusterNode
	for _, n := range v.nodes {
		if n.isMaster() && !n.failed() && c.Server(n.addr).Running() {
			masters = append(masters, n)
		}
	}
	host, port, err := net.SplitHostPort(to)
	if err != nil {
		c.tb.Fatalf("redistest: MoveSlots: %v", err)
	}
	for _, slot := range slots {
		src := v.owner(slot)
		if src == nil {
			c.tb.Fatalf("redistest: MoveSlots: slot %d has no owner\n%s", slot, c.report())
		}
		if src.id == dst.id {
			continue
		}
		if err := c.moveSlot(slot, src, dst, host, port, masters); err != nil {
			c.tb.Fatalf("redistest: MoveSlots: slot %d from %s to %s: %v\n%s", slot, src.addr, to, err, c.report())
		}
	}
	c.wait("every node to agree on the moved slots", false)
}

// moveSlot migrates one slot from src to dst.
func (c *Cluster) moveSlot(slot int, src, dst *clusterNode, host, port string, masters []*clusterNode) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterWaitTimeout)
	defer cancel()
	from, to := c.client(src.addr), c.client(dst.addr)
	if err := to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id).Err(); err != nil {
		return fmt.Errorf("SETSLOT IMPORTING on %s: %w", dst.addr, err)
	}
	if err := from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id).Err(); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING on %s: %w", src.addr, err)
	}
	for {
		keys, err := from.ClusterGetKeysInSlot(ctx, slot, migrateBatch).Result()
		if err != nil {
			return fmt.Errorf("GETKEYSINSLOT on %s: %w", src.addr, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, adminTimeout.Milliseconds(), "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := from.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("MIGRATE %d keys: %w", len(keys), err)
		}
	}
	// The new owner first, so that it never redirects back to the old one;
	// then the old owner and every other master, which would otherwise learn
	// it by gossip.
	if err := to.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err(); err != nil {
		return fmt.Errorf("SETSLOT NODE on %s: %w", dst.addr, err)
	}
	for _, m := range masters {
		if m.id == dst.id {
			continue
		}
		if err := c.client(m.addr).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err(); err != nil {
			return fmt.Errorf("SETSLOT NODE on %s: %w", m.addr, err)
		}
	}
	return nil
}

// client returns the administrative client for the node at addr.
func (c *Cluster) client(addr string) *redis.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.admin[addr]
	if !ok {
		cl = NewClient(c.tb, addr)
		c.admin[addr] = cl
	}
	return cl
}

// view returns the cluster as the first running node that answers sees it.
func (c *Cluster) view() *clusterView {
	c.tb.Helper()
	var errs []error
	for _, s := range c.nodes {
		if !s.Running() {
			continue
		}
		v, err := c.nodeView(s.Addr())
		if err == nil {
			return v
		}
		errs = append(errs, err)
	}
	c.tb.Fatalf("redistest: no cluster node answers CLUSTER NODES: %v\n%s", errors.Join(errs...), c.report())
	return nil
}

// nodeView returns the cluster as the node at addr sees it.
func (c *Cluster) nodeView(addr string) (*clusterView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	text, err := c.client(addr).ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", addr, err)
	}
	v, err := parseClusterNodes(text)
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", addr, err)
	}
	return v, nil
}

// wait polls until the cluster is healthy (see check), or calls Fatal.
func (c *Cluster) wait(what string, replicas bool) {
	c.tb.Helper()
	deadline := time.Now().Add(clusterWaitTimeout)
	tick := time.NewTicker(clusterPoll)
	defer tick.Stop()
	for {
		err := c.check(replicas)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("redistest: waited %v for %s: %v\n%s", clusterWaitTimeout, what, err, c.report())
		}
		<-tick.C
	}
}

// check reports why the cluster is not healthy, or nil. Healthy means every
// running node reports cluster_state:ok with all slots ok, all running nodes
// agree on the slot map, and every slot is served by a running master that
// knows itself as such. With replicas, every master also has a replica in
// sync, and no node is flagged as failing.
func (c *Cluster) check(replicas bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	var first *clusterView
	var firstAddr string
	for _, s := range c.nodes {
		if !s.Running() {
			continue
		}
		addr := s.Addr()
		info, err := c.client(addr).ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", addr, err)
		}
		fields := infoFields(info)
		if fields["cluster_state"] != "ok" || fields["cluster_slots_ok"] != strconv.Itoa(SlotCount) {
			return fmt.Errorf("%s reports cluster_state:%s cluster_slots_ok:%s", addr, fields["cluster_state"], fields["cluster_slots_ok"])
		}
		v, err := c.nodeView(addr)
		if err != nil {
			return err
		}
		if first == nil {
			first, firstAddr = v, addr
		} else if got, want := v.slotMap(), first.slotMap(); got != want {
			return fmt.Errorf("%s and %s disagree on the slot map: %s vs %s", addr, firstAddr, got, want)
		}
		if replicas {
			for _, n := range v.nodes {
				if n.failed() || n.has("handshake") || n.has("noaddr") {
					return fmt.Errorf("%s sees %s (%s) as %s", addr, n.id, n.addr, strings.Join(n.flags, ","))
				}
			}
		}
	}
	if first == nil {
		return errors.New("no node is running")
	}
	for slot := 0; slot < SlotCount; {
		n := first.owner(slot)
		if n == nil {
			return fmt.Errorf("slot %d has no owner", slot)
		}
		if s := c.Server(n.addr); s == nil || !s.Running() {
			return fmt.Errorf("slot %d belongs to %s, which is not running", slot, n.addr)
		}
		slot = n.rangeEnd(slot) + 1
	}
	if !replicas {
		return nil
	}
	for _, m := range first.nodes {
		if !m.isMaster() || len(m.slots) == 0 {
			continue
		}
		found := false
		for _, r := range first.nodes {
			if r.master != m.id {
				continue
			}
			info, err := c.client(r.addr).Info(ctx, "replication").Result()
			if err != nil {
				return fmt.Errorf("INFO replication on %s: %w", r.addr, err)
			}
			f := infoFields(info)
			if f["master_link_status"] != "up" || f["master_sync_in_progress"] != "0" {
				return fmt.Errorf("replica %s of %s: master_link_status:%s master_sync_in_progress:%s",
					r.addr, m.addr, f["master_link_status"], f["master_sync_in_progress"])
			}
			found = true
		}
		if !found {
			return fmt.Errorf("master %s has no replica", m.addr)
		}
	}
	return nil
}

// report describes every node, for failure messages: whether it runs, its
// view of the cluster and the end of its log.
func (c *Cluster) report() string {
	var b strings.Builder
	for _, s := range c.nodes {
		fmt.Fprintf(&b, "--- node %s (running: %v)\n", s.Addr(), s.Running())
		if s.Running() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if text, err := c.client(s.Addr()).ClusterNodes(ctx).Result(); err == nil {
				b.WriteString(text)
			} else {
				fmt.Fprintf(&b, "CLUSTER NODES: %v\n", err)
			}
			cancel()
		}
		b.WriteString(s.logTailN(logTailBytes / 2))
		b.WriteByte('\n')
	}
	return b.String()
}

// infoFields parses "name:value" lines, as INFO and CLUSTER INFO return them.
func infoFields(text string) map[string]string {
	f := make(map[string]string)
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			f[k] = v
		}
	}
	return f
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id     string
	addr   string // "ip:port", without the bus port
	flags  []string
	master string   // the master's id for a replica, "-" for a master
	slots  [][2]int // served ranges, first to last inclusive, in order
}

func (n *clusterNode) has(flag string) bool { return slices.Contains(n.flags, flag) }
func (n *clusterNode) isMaster() bool       { return n.has("master") }
func (n *clusterNode) failed() bool         { return n.has("fail") || n.has("fail?") }

// rangeEnd returns the last slot of n's range that holds slot.
func (n *clusterNode) rangeEnd(slot int) int {
	for _, r := range n.slots {
		if r[0] <= slot && slot <= r[1] {
			return r[1]
		}
	}
	return slot
}

// clusterView is the cluster as one node sees it.
type clusterView struct {
	nodes []*clusterNode
}

func (v *clusterView) byAddr(addr string) *clusterNode {
	for _, n := range v.nodes {
		if n.addr == addr {
			return n
		}
	}
	return nil
}

// owner returns the master serving slot, or nil.
func (v *clusterView) owner(slot int) *clusterNode {
	for _, n := range v.nodes {
		if !n.isMaster() {
			continue
		}
		for _, r := range n.slots {
			if r[0] <= slot && slot <= r[1] {
				return n
			}
		}
	}
	return nil
}

// slotMap returns the view's slot ranges and their owners as one string,
// for comparing views.
func (v *clusterView) slotMap() string {
	type owned struct {
		r  [2]int
		id string
	}
	var all []owned
	for _, n := range v.nodes {
		if !n.isMaster() {
			continue
		}
		for _, r := range n.slots {
			all = append(all, owned{r, n.id})
		}
	}
	slices.SortFunc(all, func(a, b owned) int { return a.r[0] - b.r[0] })
	var b strings.Builder
	for _, o := range all {
		fmt.Fprintf(&b, "%d-%d:%.8s ", o.r[0], o.r[1], o.id)
	}
	return strings.TrimSpace(b.String())
}

// parseClusterNodes parses the reply of CLUSTER NODES:
//
//	<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot> ...
//
// Slots being imported or migrated ("[slot->-id]", "[slot-<-id]") are left
// out: they still belong to their owner.
func parseClusterNodes(text string) (*clusterView, error) {
	v := &clusterView{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("malformed line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := &clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3]}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || a < 0 || b < a || b >= SlotCount {
				return nil, fmt.Errorf("malformed slot range %q in line %q", s, line)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		slices.SortFunc(n.slots, func(a, b [2]int) int { return a[0] - b[0] })
		v.nodes = append(v.nodes, n)
	}
	return v, nil
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key, or of its hash tag, modulo 16384. The hash tag is the part between
// the first "{" and the first "}" after it, when that part is not empty.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % SlotCount
}
