package core

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// TestReplicaAckValidation: New refuses a WithReplicaAck that cannot work,
// with an error naming the option, and accepts the edges.
func TestReplicaAckValidation(t *testing.T) {
	addr := refusedAddr(t) // New does no I/O
	tests := []struct {
		name string
		opts []Option
		ok   bool
	}{
		{"no replica", []Option{WithReplicaAck(0, 5*time.Millisecond)}, false},
		{"negative replicas", []Option{WithReplicaAck(-1, 5*time.Millisecond)}, false},
		{"zero timeout", []Option{WithReplicaAck(1, 0)}, false},
		{"below a millisecond", []Option{WithReplicaAck(1, 500*time.Microsecond)}, false},
		{"beyond the default budget", []Option{WithReplicaAck(1, 51*time.Millisecond)}, false},
		{"beyond a set budget", []Option{WithTimeout(10 * time.Millisecond), WithReplicaAck(1, 11*time.Millisecond)}, false},
		{"the whole budget", []Option{WithReplicaAck(2, 50*time.Millisecond)}, true},
		{"a millisecond", []Option{WithReplicaAck(1, time.Millisecond)}, true},
		{"no budget", []Option{WithTimeout(0), WithReplicaAck(1, time.Hour)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(outageClient(t, addr), tt.opts...)
			switch {
			case tt.ok && err != nil:
				t.Fatalf("New() = %v, want no error", err)
			case !tt.ok && (err == nil || !strings.Contains(err.Error(), "WithReplicaAck")):
				t.Fatalf("New() = %v, want an error naming WithReplicaAck", err)
			}
		})
	}
}

// waitCalls returns how many WAIT and EVALSHA commands the server at addr
// has run.
func waitCalls(t *testing.T, admin *redis.Client) (wait, evalsha int64) {
	t.Helper()
	calls, err := redistest.CommandCalls(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	return calls["wait"], calls["evalsha"]
}

// startReplicated starts a private master and a replica of it, and waits
// until the replica is in sync. It returns their addresses.
func startReplicated(t *testing.T) (master, replica string) {
	t.Helper()
	m := redistest.Start(t)
	host, port, _ := strings.Cut(m.Addr(), ":")
	r := redistest.Start(t, "--replicaof", host, port)
	admin := redistest.NewClient(t, r.Addr())
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := admin.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0") {
			return m.Addr(), r.Addr()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica %s is not in sync with %s after 10s: %v\n%s", r.Addr(), m.Addr(), err, info)
		}
		time.Sleep(20 * time.Millisecond) // polling for a condition, with a deadline
	}
}

// ackRun is what one run of decisions cost a server.
type ackRun struct {
	took                  time.Duration
	evalsha, wait, misses int64
	logs                  string
}

// runAckDecisions decides 8 keys 7 times each under PerMinute(5) from 8
// goroutines through a new limiter on addr with opts, after one warm-up
// decision, and checks that every decision came from Redis and was exact.
func runAckDecisions(t *testing.T, addr string, opts ...Option) ackRun {
	t.Helper()
	ctx := context.Background()
	limit := PerMinute(5)
	logs := &syncWriter{w: &strings.Builder{}}
	// A fixed fallback share: the implicit fleet's heartbeats are script
	// calls too, and this run counts decisions' calls.
	opts = append([]Option{WithTimeout(2 * time.Second), WithFallbackReplicas(1), WithLogger(slog.New(slog.NewTextHandler(logs, nil)))}, opts...)
	lim := newRedisLimiter(t, addr, opts...)
	if _, err := lim.Allow(ctx, "warm", limit); err != nil { // may load the script
		t.Fatal(err)
	}
	admin := redistest.NewClient(t, addr)
	misses0 := lim.ReplicaAckMisses()
	wait0, eval0 := waitCalls(t, admin)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for k := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 7 {
				res, err := lim.Allow(ctx, fmt.Sprintf("k%d", k), limit)
				if err != nil || res.Degraded || res.Allowed != (i < limit.Burst) {
					errs <- fmt.Errorf("Allow(k%d) #%d = %+v, %v; want Allowed %v from Redis", k, i+1, res, err, i < limit.Burst)
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	wait1, eval1 := waitCalls(t, admin)
	r := ackRun{took: took, evalsha: eval1 - eval0, wait: wait1 - wait0, misses: lim.ReplicaAckMisses() - misses0, logs: logs.String()}
	t.Logf("56 decisions in %v: %d EVALSHA, %d WAIT, %d misses", r.took, r.evalsha, r.wait, r.misses)
	return r
}

// TestReplicaAckSendsWait counts the commands a private master with one
// replica runs: without WithReplicaAck no WAIT, with it one WAIT per script
// call, lone and batched, and no miss.
func TestReplicaAckSendsWait(t *testing.T) {
	t.Parallel() // waits on Redis and timers more than it computes
	master, _ := startReplicated(t)
	for _, ack := range []bool{false, true} {
		for _, inflight := range []int{0, 4} {
			t.Run(fmt.Sprintf("ack=%v/batching=%d", ack, inflight), func(t *testing.T) {
				opts := []Option{WithPrefix(fmt.Sprintf("ack:%v:%d:", ack, inflight)), WithBatching(inflight)}
				if ack {
					opts = append(opts, WithReplicaAck(1, time.Second))
				}
				r := runAckDecisions(t, master, opts...)
				switch {
				case r.evalsha == 0:
					t.Fatal("no EVALSHA")
				case !ack && (r.wait != 0 || r.misses != 0):
					t.Fatalf("without WithReplicaAck: %d WAIT, %d misses; want none", r.wait, r.misses)
				case ack && r.wait != r.evalsha:
					t.Fatalf("with WithReplicaAck: %d WAIT for %d EVALSHA; want one each", r.wait, r.evalsha)
				case ack && r.misses != 0:
					t.Fatalf("with WithReplicaAck and the replica up: %d misses, want 0", r.misses)
				}
			})
		}
	}
}

// TestReplicaAckShortfall decides on a server without replicas with
// WithReplicaAck(1, 200ms): the decisions stand (exact, not degraded),
// every one is counted by ReplicaAckMisses, the limiter logs the shortfall
// once, and after the first shortfall only one call per 100ms waits (a
// probe) rather than every call waiting out the timeout.
func TestReplicaAckShortfall(t *testing.T) {
	srv := redistest.Start(t)
	for _, inflight := range []int{0, 4} {
		t.Run(fmt.Sprintf("batching=%d", inflight), func(t *testing.T) {
			r := runAckDecisions(t, srv.Addr(), WithPrefix(fmt.Sprintf("short:%d:", inflight)), WithBatching(inflight),
				WithReplicaAck(1, 200*time.Millisecond))
			if r.misses < r.evalsha {
				t.Errorf("ReplicaAckMisses grew by %d for %d script calls on a server without replicas; want every decision counted", r.misses, r.evalsha)
			}
			// Each probe waits out the timeout (or more: Redis notices an
			// expired WAIT when its event loop wakes).
			if maxProbes := 2 + int64(r.took/redisstore.AckProbeEvery); r.wait > maxProbes {
				t.Errorf("%d WAIT in %v, want at most %d: one probe per %v", r.wait, r.took, maxProbes, redisstore.AckProbeEvery)
			}
			if r.took > 5*time.Second {
				t.Errorf("%d calls took %v: calls kept waiting out the timeout", r.evalsha, r.took)
			}
			if n := strings.Count(r.logs, "did not acknowledge"); n != 1 {
				t.Errorf("logged the shortfall %d times, want once:\n%s", n, r.logs)
			}
		})
	}
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestReplicaAckCluster decides on keys over all three masters of a
// Cluster, lone and batched, with WithReplicaAck(1, ...): each master runs
// one WAIT per pipeline of script calls it runs (so one per script call
// when decisions are not batched): the WAIT went to the master that wrote,
// not wherever the Cluster client sends a keyless command. No decision is
// counted as a miss.
func TestReplicaAckCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t)
	ctx := context.Background()
	masters := c.Masters()
	counts := func() map[string][2]int64 {
		m := make(map[string][2]int64, len(masters))
		for _, addr := range masters {
			w, e := waitCalls(t, redistest.NewClient(t, addr))
			m[addr] = [2]int64{w, e}
		}
		return m
	}
	limit := PerMinute(3)
	for _, inflight := range []int{0, 4} {
		t.Run(fmt.Sprintf("batching=%d", inflight), func(t *testing.T) {
			rdb := c.Client(t)
			if err := rdb.Ping(ctx).Err(); err != nil { // loads the slot map
				t.Fatal(err)
			}
			// A budget and a wait no loaded machine blows: the test is
			// about where the WAITs go, not about latency. A stated
			// fleet size: the implicit fleet's heartbeat is a script
			// call a second with no WAIT (it waits for no replica), and
			// one that fell in the measured window made a master's
			// count 130 EVALSHA for 129 WAIT in CI's Valkey pass.
			lim, err := New(rdb, WithReplicaAck(1, 5*time.Second), WithTimeout(10*time.Second), WithBatching(inflight),
				WithPrefix(fmt.Sprintf("ackc%d:", inflight)), WithFallbackReplicas(1))
			if err != nil {
				t.Fatal(err)
			}
			// Load the script on every master first: a NOSCRIPT is
			// answered by an EVAL with a WAIT of its own.
			for i := range 30 {
				if _, err := lim.Allow(ctx, fmt.Sprintf("warm%d", i), limit); err != nil {
					t.Fatal(err)
				}
			}
			before := counts()
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 40 {
						key := fmt.Sprintf("user:%d:%d", g, i%10)
						if res, err := lim.Allow(ctx, key, limit); err != nil || res.Degraded {
							errs <- fmt.Errorf("Allow(%s) = %+v, %v; want a decision by Redis", key, res, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			after := counts()
			for _, addr := range masters {
				waits, evals := after[addr][0]-before[addr][0], after[addr][1]-before[addr][1]
				t.Logf("master %s: %d EVALSHA, %d WAIT", addr, evals, waits)
				// A batch is one pipeline per master: a script call per
				// hash tag, and one WAIT after them all.
				if evals == 0 || waits == 0 || waits > evals || (inflight == 0 && waits != evals) {
					t.Errorf("master %s ran %d WAIT for %d EVALSHA, want one per pipeline (and some)", addr, waits, evals)
				}
			}
			if n := lim.ReplicaAckMisses(); n != 0 {
				t.Errorf("ReplicaAckMisses() = %d, want 0 with every replica up", n)
			}
		})
	}
}

// TestReplicaAckSentinel decides through a Sentinel failover client with
// WithReplicaAck(1, ...): right after each decision returns, the replica
// holds the same bucket as the master, and no decision is counted as a
// miss. Decisions run lone and batched, from several goroutines.
func TestReplicaAckSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel deployment")
	}
	s := redistest.StartSentinel(t)
	master := s.Master()
	var replica string
	for _, a := range s.Addrs() {
		if a != master {
			replica = a
		}
	}
	onMaster, onReplica := redistest.NewClient(t, master), redistest.NewClient(t, replica)
	ctx := context.Background()
	limit := PerMinute(50)
	for _, inflight := range []int{0, 4} {
		t.Run(fmt.Sprintf("batching=%d", inflight), func(t *testing.T) {
			// A budget no loaded machine blows: this test is about where
			// the writes are, not about latency.
			lim, err := New(s.Client(t), WithReplicaAck(1, 500*time.Millisecond), WithTimeout(time.Second), WithBatching(inflight),
				WithPrefix(fmt.Sprintf("ack%d:", inflight)))
			if err != nil {
				t.Fatal(err)
			}
			p, err := lim.plans.get([]Limit{limit})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := fmt.Sprintf("user:%d", g)
					rkey := redisstore.RedisKey(redisOf(lim).Prefix(), p.FP, key)
					for i := range 20 {
						res, err := lim.Allow(ctx, key, limit)
						if err != nil || res.Degraded {
							errs <- fmt.Errorf("Allow(%s) #%d = %+v, %v; want a decision by Redis", key, i+1, res, err)
							return
						}
						want, err := onMaster.Get(ctx, rkey).Result()
						if err != nil {
							errs <- fmt.Errorf("GET %s on the master = %v", rkey, err)
							return
						}
						got, err := onReplica.Get(ctx, rkey).Result()
						if err != nil || got != want {
							errs <- fmt.Errorf("after decision #%d on %s: the replica holds %q (%v), the master %q; want the same", i+1, key, got, err, want)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := lim.ReplicaAckMisses(); n != 0 {
				t.Errorf("ReplicaAckMisses() = %d, want 0 with the replica up", n)
			}
		})
	}
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}
