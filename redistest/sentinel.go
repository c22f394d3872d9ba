package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelDownAfter is the down-after-milliseconds of the sentinels that
// [StartSentinel] starts: how long the master may be unreachable before a
// sentinel considers it down.
const SentinelDownAfter = time.Second

const (
	// sentinelFailoverTimeout is the sentinels' failover-timeout.
	sentinelFailoverTimeout = 5 * time.Second
	// sentinelCount and sentinelQuorum shape the sentinel group.
	sentinelCount  = 3
	sentinelQuorum = 2
	// sentinelMasterName is the name the sentinels monitor the master by.
	sentinelMasterName = "sluice"
	// writableKey is the key Sentinel writes to check that a master accepts
	// writes.
	writableKey = "redistest:writable"
)

// Sentinel is a private Redis Sentinel deployment of five redis-server child
// processes on loopback ports: a master, one replica, and three sentinels
// that monitor the master with a quorum of two. It is created by
// [StartSentinel]; the zero value is not usable.
//
// Every process has its own temporary directory; the data nodes save
// nothing to disk, and each sentinel keeps the configuration file it
// rewrites. All are killed when the test ends.
//
// The methods that wait or change the deployment report failure with the
// Fatal method of the testing.TB given to StartSentinel, so like Fatal they
// must be called from the goroutine running the test. They are not meant to
// be called concurrently with each other; clients may use the deployment
// meanwhile.
type Sentinel struct {
	tb        testing.TB
	data      []*Server // the first master, then its replica
	sentinels []*Server

	mu    sync.Mutex
	admin map[string]*redis.Client // by address, made on first use
}

// StartSentinel starts a master, a replica of it and three sentinels, and
// returns them once the replica is in sync and every sentinel monitors the
// master under [Sentinel.MasterName], knows the replica and knows the two
// other sentinels, so that a failover can start at once.
//
// The data nodes are started as by [Start], with --repl-diskless-sync-delay
// 0 so that the replica syncs at once; args are passed to both after that.
// Each sentinel runs the server binary (redis-server or valkey-server) with
// its own generated configuration file and --sentinel: down-after-milliseconds 1000 (see
// [SentinelDownAfter]), failover-timeout 5000 and parallel-syncs 1.
//
// When no server binary is found, StartSentinel calls tb.Skip, or tb.Fatal
// when the environment variable CI is "true" or "1", or when
// SLUICE_REDIS_SERVER names a binary that is not there. It calls tb.Fatal if
// the deployment is not ready within about 30 seconds; the message includes
// the end of every process's log.
func StartSentinel(tb testing.TB, args ...string) *Sentinel {
	tb.Helper()
	lookServer(tb)
	s := &Sentinel{tb: tb, admin: make(map[string]*redis.Client)}
	args = slices.Clone(args)
	dataArgs := func(more ...string) setupFunc {
		return func(string, int) (string, []string, error) {
			return "", append(append([]string{"--repl-diskless-sync-delay", "0"}, more...), args...), nil
		}
	}
	master := startWith(tb, freePort, dataArgs())
	host, port, _ := net.SplitHostPort(master.Addr())
	replica := startWith(tb, freePort, dataArgs("--replicaof", host, port))
	s.data = []*Server{master, replica}
	s.wait("the replica to sync", func(ctx context.Context) error {
		return s.inSync(ctx, replica.Addr(), master.Addr())
	})

	conf := strings.Join([]string{
		fmt.Sprintf("sentinel monitor %s %s %s %d", sentinelMasterName, host, port, sentinelQuorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", sentinelMasterName, SentinelDownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", sentinelMasterName, sentinelFailoverTimeout.Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", sentinelMasterName),
		"",
	}, "\n")
	setup := func(dir string, _ int) (string, []string, error) {
		// Written afresh for each attempt: a sentinel rewrites its file,
		// and one that failed to start may have done so already.
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return "", nil, err
		}
		return path, []string{"--sentinel"}, nil
	}
	for range sentinelCount {
		s.sentinels = append(s.sentinels, startWith(tb, freePort, setup))
	}
	s.wait("the sentinels to know the master, its replica and each other", func(ctx context.Context) error {
		return s.sentinelsReady(ctx, master.Addr(), true)
	})
	return s
}

// MasterName returns the name the sentinels know the master by, for
// redis.FailoverOptions.MasterName.
func (s *Sentinel) MasterName() string { return sentinelMasterName }

// SentinelAddrs returns the sentinels' addresses, "127.0.0.1:port".
func (s *Sentinel) SentinelAddrs() []string { return addrsOf(s.sentinels) }

// Addrs returns the data nodes' addresses: the first master, then its
// replica. Roles change with failovers; ask [Sentinel.Master] for the
// current master.
func (s *Sentinel) Addrs() []string { return addrsOf(s.data) }

func addrsOf(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, srv := range servers {
		addrs[i] = srv.Addr()
	}
	return addrs
}

// Server returns the data node or sentinel at addr, to kill, stop or
// restart it, or nil if there is none. A data node restarted after a kill
// comes back empty and as a master; the sentinels later turn it into a
// replica (+convert-to-slave).
func (s *Sentinel) Server(addr string) *Server {
	for _, srv := range append(slices.Clone(s.data), s.sentinels...) {
		if srv.Addr() == addr {
			return srv
		}
	}
	return nil
}

// Client returns a failover client for the limiter, closed at tb.Cleanup. It
// does no network I/O and never fails. Its cleanup waits, up to a few
// seconds, until go-redis's background goroutines for it have ended (a pool
// re-dials a dead node once a second and notices Close only then), so that
// goroutine leak checks pass.
//
// The client asks the sentinels for the master and follows failovers. Like
// [NewClient], it is tuned so that failures show up at once: dial, read and
// write timeouts of 1s, context deadlines honoured (ContextTimeoutEnabled),
// one dial attempt per connection and no command retries (MaxRetries -1).
func (s *Sentinel) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            sentinelMasterName,
		SentinelAddrs:         s.SentinelAddrs(),
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		DialerRetries:         1,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	tb.Cleanup(func() {
		_ = rdb.Close()
		drainGoRedis()
	})
	return rdb
}

// Master returns the address of the master, as the first running sentinel
// that answers reports it.
func (s *Sentinel) Master() string {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	var errs []error
	for _, sn := range s.sentinels {
		if !sn.Running() {
			continue
		}
		addr, err := s.masterAddr(ctx, sn.Addr())
		if err == nil {
			return addr
		}
		errs = append(errs, err)
	}
	s.tb.Fatalf("redistest: no sentinel reports the master: %v\n%s", errors.Join(errs...), s.report())
	return ""
}

// Failover asks a sentinel to fail the master over (SENTINEL FAILOVER), as
// an operator would, and waits as [Sentinel.WaitFailover] does. It returns
// the new master's address.
//
// The old master keeps running as a master until the sentinels reconfigure
// it as a replica of the new one (+convert-to-slave), about ten seconds
// after the switch with Redis 7.0; writes it accepts meanwhile, from clients
// that have not switched yet, are lost then.
func (s *Sentinel) Failover() string {
	s.tb.Helper()
	old := s.Master()
	s.wait("a sentinel to start the failover", func(ctx context.Context) error {
		for _, sn := range s.sentinels {
			if !sn.Running() {
				continue
			}
			err := s.client(sn.Addr()).Do(ctx, "SENTINEL", "FAILOVER", sentinelMasterName).Err()
			if err == nil || strings.HasPrefix(err.Error(), "INPROG") {
				return nil
			}
			return fmt.Errorf("SENTINEL FAILOVER on %s: %w", sn.Addr(), err)
		}
		return errors.New("no sentinel is running")
	})
	return s.WaitFailover(old)
}

// WaitFailover waits until every running sentinel reports a master other
// than old, and that master says it is one and accepts a write (a SET of
// the key "redistest:writable"). It returns the new master's address. It
// calls Fatal if that takes more than about 30 seconds. After killing the
// master, expect the sentinels to need [SentinelDownAfter] and then an
// election.
func (s *Sentinel) WaitFailover(old string) string {
	s.tb.Helper()
	var master string
	s.wait("the sentinels to promote a new master", func(ctx context.Context) error {
		addr, err := s.agreedMaster(ctx)
		if err != nil {
			return err
		}
		if addr == old {
			return fmt.Errorf("the sentinels still report %s", old)
		}
		info, err := s.client(addr).Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("INFO replication on %s: %w", addr, err)
		}
		if role := infoFields(info)["role"]; role != "master" {
			return fmt.Errorf("the sentinels report %s, which says role:%s", addr, role)
		}
		if err := s.client(addr).Set(ctx, writableKey, old, 0).Err(); err != nil {
			return fmt.Errorf("SET on %s: %w", addr, err)
		}
		master = addr
		return nil
	})
	return master
}

// agreedMaster returns the master every running sentinel reports.
func (s *Sentinel) agreedMaster(ctx context.Context) (string, error) {
	var agreed string
	for _, sn := range s.sentinels {
		if !sn.Running() {
			continue
		}
		addr, err := s.masterAddr(ctx, sn.Addr())
		if err != nil {
			return "", err
		}
		if agreed != "" && addr != agreed {
			return "", fmt.Errorf("sentinels disagree on the master: %s and %s", agreed, addr)
		}
		agreed = addr
	}
	if agreed == "" {
		return "", errors.New("no sentinel is running")
	}
	return agreed, nil
}

// masterAddr asks the sentinel at addr for the master's address.
func (s *Sentinel) masterAddr(ctx context.Context, addr string) (string, error) {
	hp, err := s.client(addr).Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinelMasterName).StringSlice()
	if err != nil {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME on %s: %w", addr, err)
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME on %s = %q", addr, hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// inSync reports whether the data node at addr is a replica of master with
// its link up and no sync in progress.
func (s *Sentinel) inSync(ctx context.Context, addr, master string) error {
	info, err := s.client(addr).Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("INFO replication on %s: %w", addr, err)
	}
	f := infoFields(info)
	got := net.JoinHostPort(f["master_host"], f["master_port"])
	if f["role"] != "slave" || got != master || f["master_link_status"] != "up" || f["master_sync_in_progress"] != "0" {
		return fmt.Errorf("%s: role:%s master %s (want %s) master_link_status:%s master_sync_in_progress:%s",
			addr, f["role"], got, master, f["master_link_status"], f["master_sync_in_progress"])
	}
	return nil
}

// sentinelsReady reports whether every running sentinel monitors master,
// sees it up, and, with full, knows a healthy replica and the other
// sentinels.
func (s *Sentinel) sentinelsReady(ctx context.Context, master string, full bool) error {
	for _, sn := range s.sentinels {
		if !sn.Running() {
			continue
		}
		addr := sn.Addr()
		got, err := s.masterAddr(ctx, addr)
		if err != nil {
			return err
		}
		if got != master {
			return fmt.Errorf("sentinel %s reports master %s, want %s", addr, got, master)
		}
		m, err := s.client(addr).Do(ctx, "SENTINEL", "MASTER", sentinelMasterName).Result()
		if err != nil {
			return fmt.Errorf("SENTINEL MASTER on %s: %w", addr, err)
		}
		f := fieldMap(m)
		if f["flags"] != "master" {
			return fmt.Errorf("sentinel %s sees the master as %s", addr, f["flags"])
		}
		if !full {
			continue
		}
		if f["num-slaves"] != "1" || f["num-other-sentinels"] != strconv.Itoa(sentinelCount-1) {
			return fmt.Errorf("sentinel %s knows %s replicas and %s other sentinels", addr, f["num-slaves"], f["num-other-sentinels"])
		}
		rs, err := s.client(addr).Do(ctx, "SENTINEL", "REPLICAS", sentinelMasterName).Slice()
		if err != nil {
			return fmt.Errorf("SENTINEL REPLICAS on %s: %w", addr, err)
		}
		for _, r := range rs {
			rf := fieldMap(r)
			if rf["flags"] != "slave" || rf["master-link-status"] != "ok" {
				return fmt.Errorf("sentinel %s sees replica %s:%s as %s, link %s", addr, rf["ip"], rf["port"], rf["flags"], rf["master-link-status"])
			}
		}
	}
	return nil
}

// fieldMap turns a sentinel's reply about one instance, a flat list of names
// and values (RESP2) or a map (RESP3), into a map.
func fieldMap(v any) map[string]string {
	f := make(map[string]string)
	switch v := v.(type) {
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			f[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
		}
	case map[any]any:
		for k, val := range v {
			f[fmt.Sprint(k)] = fmt.Sprint(val)
		}
	case map[string]any:
		for k, val := range v {
			f[k] = fmt.Sprint(val)
		}
	}
	return f
}

// client returns the administrative client for the process at addr.
func (s *Sentinel) client(addr string) *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	cl, ok := s.admin[addr]
	if !ok {
		cl = NewClient(s.tb, addr)
		s.admin[addr] = cl
	}
	return cl
}

// wait polls cond until it returns nil, or calls Fatal after about 30
// seconds.
func (s *Sentinel) wait(what string, cond func(ctx context.Context) error) {
	s.tb.Helper()
	deadline := time.Now().Add(clusterWaitTimeout)
	tick := time.NewTicker(clusterPoll)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		err := cond(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redistest: waited %v for %s: %v\n%s", clusterWaitTimeout, what, err, s.report())
		}
		<-tick.C
	}
}

// report describes every process for failure messages: whether it runs and
// the end of its log.
func (s *Sentinel) report() string {
	var b strings.Builder
	for i, srv := range append(slices.Clone(s.data), s.sentinels...) {
		kind := "data node"
		if i >= len(s.data) {
			kind = "sentinel"
		}
		fmt.Fprintf(&b, "--- %s %s (running: %v)\n%s\n", kind, srv.Addr(), srv.Running(), srv.logTailN(logTailBytes/2))
	}
	return b.String()
}
