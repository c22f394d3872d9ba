package core_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// TestFailoverTable measures, on the real Sentinel and Cluster kits, how
// many requests per key a fleet of limiters admits beyond the limit while
// Redis fails over, with and without core.WithReplicaAck, and what the
// wait costs in decisions per second. It prints the tables published in
// docs/topologies.md ("Over-admission during a failover"), where the method
// is explained. It is a measurement, not a check: it asserts nothing about
// the numbers, and it takes several minutes, so it runs only when asked:
//
//	SLUICE_FAILOVER_TABLE=1 go test ./core -run TestFailoverTable -v -count=1 -timeout 20m
//
// SLUICE_FAILOVER_REPS sets the repetitions per row (default 3).
func TestFailoverTable(t *testing.T) {
	if os.Getenv("SLUICE_FAILOVER_TABLE") != "1" {
		t.Skip("a measurement of several minutes; run it with: SLUICE_FAILOVER_TABLE=1 go test ./core -run TestFailoverTable -v -count=1 -timeout 20m")
	}
	reps := 3
	if s := os.Getenv("SLUICE_FAILOVER_REPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_FAILOVER_REPS=%q, want a positive integer", s)
		}
		reps = n
	}
	results := map[string][]foResult{}
	var order []string
	for rep := range reps {
		for _, sc := range foScenarios {
			for _, ack := range []bool{false, true} {
				row := foRowName(sc.name, ack)
				if _, ok := results[row]; !ok {
					order = append(order, row)
				}
				t.Run(fmt.Sprintf("%s/rep%d", row, rep+1), func(t *testing.T) {
					r := runFailover(t, sc, ack)
					results[row] = append(results[row], r)
				})
			}
		}
	}
	t.Logf("over-admission per key, %d runs per row, %d hot keys per run, limit %s, offered about %d/s per key by %d limiters:\n%s",
		reps, foKeys, foLimit, foOffered(), foInstances, foTable(order, results))

	t.Run("wait cost", func(t *testing.T) {
		t.Logf("WithReplicaAck(1, %v) cost on the Sentinel kit (master + replica, loopback), %d callers, %v per round:\n%s",
			foAckTimeout, costCallers, costRound, waitCost(t, reps))
	})
}

// The measured setup. foLimit refills in 100ms, faster than any failover
// takes, so the lost writes of a crash admit nothing extra by themselves
// (the bucket would be full again anyway); a graceful failover loses the
// writes of about a second, during which the old master admits at the full
// rate, beside the new one.
var (
	foLimit      = core.Limit{Rate: 100, Period: time.Second, Burst: 10}
	foKeys       = 6                    // hot keys per run, all on the master that fails
	foInstances  = 3                    // limiters, as replicas of a service, each with its own client
	foTick       = 6 * time.Millisecond // per limiter and key: about 167 requests/s, 500/s per key in all
	foBudget     = 100 * time.Millisecond
	foAckTimeout = 20 * time.Millisecond
	foBefore     = 1500 * time.Millisecond // load before the failover
	foAfter      = 3 * time.Second         // load after the failover has completed
)

func foOffered() int { return foInstances * int(time.Second/foTick) }

// foScenario is one way for the master to fail.
type foScenario struct {
	name string
	run  func(t *testing.T, f *foFixture) foEvent
}

var foScenarios = []foScenario{
	{"Sentinel, master SIGKILLed", func(t *testing.T, f *foFixture) foEvent { return f.sentinelFail(t, true) }},
	{"Sentinel, SENTINEL FAILOVER", func(t *testing.T, f *foFixture) foEvent { return f.sentinelFail(t, false) }},
	{"Cluster, master SIGKILLed", func(t *testing.T, f *foFixture) foEvent { return f.clusterKill(t) }},
}

func foRowName(scenario string, ack bool) string {
	if ack {
		return scenario + ", WAIT"
	}
	return scenario + ", no WAIT"
}

// foEvent is when a failover began and completed, and the buckets the
// replica held when the master was killed (nil after a graceful failover,
// whose old master stays up).
type foEvent struct {
	at, done time.Duration // from the start of the load
	frozen   map[int]int64 // key index -> the replica's stored TAT, in unix microseconds
}

// foFixture is one run: a topology, the limiters, the hot keys, the load.
type foFixture struct {
	lims    []*core.Limiter
	keys    []string
	stored  []string // each key's stored name
	master  string   // the address of the master holding the keys
	replica string   // its replica
	read    func(ctx context.Context, names []string) ([]any, error)
	load    *foLoad
	sen     *redistest.Sentinel
	cluster *redistest.Cluster
	slot    int
}

// foDecision is one decision of the load.
type foDecision struct {
	start, end time.Duration // from the start of the load
	reset      time.Duration
	key        int16
	inst       int8
	allowed    bool
	degraded   bool
}

// foLoad has every limiter ask for every hot key every foTick, and records
// each decision.
type foLoad struct {
	t0   time.Time
	stop chan struct{}
	wg   sync.WaitGroup
	errs atomic.Int64
	mu   sync.Mutex
	all  []foDecision
}

func startFoLoad(lims []*core.Limiter, keys []string, limit core.Limit) *foLoad {
	l := &foLoad{t0: time.Now(), stop: make(chan struct{})}
	ctx := context.Background()
	for i, lim := range lims {
		for k, key := range keys {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				var mine []foDecision
				tick := time.NewTicker(foTick)
				defer tick.Stop()
				for {
					select {
					case <-l.stop:
						l.mu.Lock()
						l.all = append(l.all, mine...)
						l.mu.Unlock()
						return
					case <-tick.C:
					}
					start := time.Since(l.t0)
					res, err := lim.Allow(ctx, key, limit)
					end := time.Since(l.t0)
					if err != nil {
						l.errs.Add(1)
						continue
					}
					mine = append(mine, foDecision{start: start, end: end, reset: res.ResetAfter, key: int16(k), inst: int8(i),
						allowed: res.Allowed, degraded: res.Degraded})
				}
			}()
		}
	}
	return l
}

func (l *foLoad) now() time.Duration { return time.Since(l.t0) }

func (l *foLoad) finish() []foDecision {
	close(l.stop)
	l.wg.Wait()
	slices.SortFunc(l.all, func(a, b foDecision) int { return int(a.end - b.end) })
	return l.all
}

// newFoLimiters returns foInstances limiters, each on its own client from
// mk, sized for foInstances replicas.
func newFoLimiters(t *testing.T, mk func() redis.UniversalClient, ack bool) []*core.Limiter {
	t.Helper()
	lims := make([]*core.Limiter, foInstances)
	for i := range lims {
		rdb := mk()
		warmClient(t, rdb)
		opts := []core.Option{
			core.WithTimeout(foBudget),
			core.WithFailurePolicy(core.FallbackLocal),
			core.WithFallbackReplicas(foInstances),
			core.WithPrefix("hot:"),
			core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		}
		if ack {
			opts = append(opts, core.WithReplicaAck(1, foAckTimeout))
		}
		lim, err := core.New(rdb, opts...)
		if err != nil {
			t.Fatal(err)
		}
		lims[i] = lim
	}
	return lims
}

// sentinelFail fails the master of a new Sentinel deployment over under
// load: by SIGKILL, or by SENTINEL FAILOVER.
func (f *foFixture) sentinelFail(t *testing.T, kill bool) foEvent {
	old := f.sen.Master()
	if !kill {
		at := f.load.now()
		f.sen.Failover()
		return foEvent{at: at, done: f.load.now()}
	}
	at := f.load.now()
	f.sen.Server(old).Kill()
	frozen := f.freeze(t)
	f.sen.WaitFailover(old)
	return foEvent{at: at, done: f.load.now(), frozen: frozen}
}

// clusterKill SIGKILLs the master holding the hot keys.
func (f *foFixture) clusterKill(t *testing.T) foEvent {
	at := f.load.now()
	f.cluster.KillMaster(f.slot)
	frozen := f.freeze(t)
	f.cluster.WaitHealthy()
	return foEvent{at: at, done: f.load.now(), frozen: frozen}
}

// freeze reads the hot keys' buckets on the replica right after its master
// died: replication has stopped, so this is what the promoted replica will
// start from.
func (f *foFixture) freeze(t *testing.T) map[int]int64 {
	t.Helper()
	vals, err := f.read(context.Background(), f.stored)
	if err != nil {
		// Not fatal: the load is running. The run is kept, without this
		// measure.
		t.Errorf("reading the replica %s after the kill: %v", f.replica, err)
		return nil
	}
	frozen := make(map[int]int64, len(vals))
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // no bucket: full
		}
		fields := strings.Fields(s)
		if len(fields) < 2 {
			t.Errorf("stored bucket %q of %s: want lock tat frac", s, f.stored[i])
			return nil
		}
		tat, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			t.Errorf("stored bucket %q of %s: %v", s, f.stored[i], err)
			return nil
		}
		frozen[i] = tat
	}
	return frozen
}

// storedNames finds the stored name of each hot key on the master at addr.
func storedNames(t *testing.T, addr string, keys []string) []string {
	t.Helper()
	names := scanMaster(t, addr, "hot:")
	out := make([]string, len(keys))
	for i, k := range keys {
		for _, n := range names {
			if strings.HasSuffix(n, ":"+k) {
				out[i] = n
			}
		}
		if out[i] == "" {
			t.Fatalf("no bucket of key %s on %s (found %d buckets)", k, addr, len(names))
		}
	}
	return out
}

// foResult is what one run measured.
type foResult struct {
	keys                   []foKeyResult
	firstDegraded, backAt  time.Duration   // from the failover's start; -1: none
	backEach               []time.Duration // each limiter's last degraded decision, from the failover's start; -1: none
	promoted               time.Duration   // failover's start to the new master serving
	decisions, degradedN   int
	misses                 int64
	errs                   int64
	lostRawMax, lostRawSum int // acknowledged admissions the replica never saw (kills only); -1: not measured
}

// foKeyResult is one key's accounting over the run.
type foKeyResult struct {
	admitted, bound int
	over            int // admitted - bound
	lost            int // Redis admissions a bucket without lost writes would have refused
	fallback        int // over - lost: from deciding outside Redis
	degraded        int // admissions made by the fallback
	lateFallback    int // of those, made after the first limiter was back on Redis (see foResult.backEach)
	lostRaw         int // -1: not measured
}

// runFailover runs one scenario once, in a deployment of its own, under
// foLimit.
func runFailover(t *testing.T, sc foScenario, ack bool) foResult {
	return runFailoverUnder(t, sc, ack, foLimit)
}

// runFailoverUnder is runFailover with the hot keys under limit.
func runFailoverUnder(t *testing.T, sc foScenario, ack bool, limit core.Limit) foResult {
	f := &foFixture{keys: make([]string, foKeys)}
	if strings.HasPrefix(sc.name, "Cluster") {
		c := redistest.StartCluster(t)
		f.cluster = c
		// go-redis's defaults, but for the context deadlines the limiter
		// requires; no ClusterStateReloadInterval.
		f.lims = newFoLimiters(t, func() redis.UniversalClient {
			return c.ClientWith(t, func(o *redis.ClusterOptions) {
				o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 0, 0, 0
				o.DialerRetries, o.MaxRetries, o.ClusterStateReloadInterval = 0, 0, 0
			})
		}, ack)
		// Hot keys on the master of the first candidate's slot.
		candidates := make([]string, 60)
		for i := range candidates {
			candidates[i] = fmt.Sprintf("c%02d", i)
		}
		loc, err := core.New(c.Client(t), core.WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		warm(t, loc, candidates, core.PerHour(1).WithName("locate"))
		home, slots := bucketHomes(t, c, candidates)
		f.master = home[candidates[0]]
		f.slot = slots[candidates[0]]
		n := 0
		for _, k := range candidates {
			if home[k] == f.master && n < foKeys {
				f.keys[n] = k
				n++
			}
		}
		if n < foKeys {
			t.Fatalf("only %d of %d candidate keys on %s", n, len(candidates), f.master)
		}
		f.replica = replicaOf(t, c, f.master)
		rc := redistest.NewClient(t, f.replica)
		f.read = func(ctx context.Context, names []string) ([]any, error) {
			conn := rc.Conn()
			defer conn.Close()
			if err := conn.ReadOnly(ctx).Err(); err != nil {
				return nil, err
			}
			// One GET per name: the names live in different slots.
			cmds, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, n := range names {
					p.Get(ctx, n)
				}
				return nil
			})
			if err != nil && err != redis.Nil {
				return nil, err
			}
			vals := make([]any, len(cmds))
			for i, c := range cmds {
				if v, err := c.(*redis.StringCmd).Result(); err == nil {
					vals[i] = v
				}
			}
			return vals, nil
		}
	} else {
		s := redistest.StartSentinel(t)
		f.sen = s
		f.lims = newFoLimiters(t, func() redis.UniversalClient { return sentinelDefaultClient(t, s) }, ack)
		for i := range f.keys {
			f.keys[i] = fmt.Sprintf("s%02d", i)
		}
		f.master = s.Master()
		for _, a := range s.Addrs() {
			if a != f.master {
				f.replica = a
			}
		}
		rc := redistest.NewClient(t, f.replica)
		f.read = func(ctx context.Context, names []string) ([]any, error) { return rc.MGet(ctx, names...).Result() }
	}

	f.load = startFoLoad(f.lims, f.keys, limit)
	pause(foBefore)
	f.stored = storedNames(t, f.master, f.keys)
	ev := sc.run(t, f)
	pause(foAfter)
	all := f.load.finish()

	r := foResult{decisions: len(all), errs: f.load.errs.Load(), promoted: ev.done - ev.at, firstDegraded: -1, backAt: -1}
	for _, lim := range f.lims {
		r.misses += lim.ReplicaAckMisses()
	}
	byKey := make([][]foDecision, foKeys)
	for _, d := range all {
		byKey[d.key] = append(byKey[d.key], d)
		if d.degraded {
			r.degradedN++
			if d.start >= ev.at {
				if r.firstDegraded < 0 || d.start-ev.at < r.firstDegraded {
					r.firstDegraded = d.start - ev.at
				}
				r.backAt = max(r.backAt, d.end-ev.at)
			}
		}
	}
	r.lostRawMax, r.lostRawSum = -1, -1
	if ev.frozen != nil {
		r.lostRawMax, r.lostRawSum = 0, 0
	}
	for k, ds := range byKey {
		kr := accountKey(ds, limit)
		if ev.frozen != nil {
			kr.lostRaw = lostAcknowledged(ds, ev, f.load.t0, ev.frozen, k, limit)
			r.lostRawMax = max(r.lostRawMax, kr.lostRaw)
			r.lostRawSum += kr.lostRaw
		}
		r.keys = append(r.keys, kr)
	}
	t.Logf("%d decisions (%d degraded, %d errors, %d WAIT misses); failover began at %v, new master serving %v later; degraded from %v to %v after it began; acknowledged admissions the replica never saw: %d in all",
		r.decisions, r.degradedN, r.errs, r.misses, ev.at, r.promoted, r.firstDegraded, r.backAt, r.lostRawSum)
	r.backEach = lastDegradedEach(all, ev.at)
	if first := firstBack(r.backEach); first >= 0 {
		for _, d := range all {
			if d.degraded && d.allowed && d.start-ev.at >= first {
				r.keys[d.key].lateFallback++
			}
		}
	}
	t.Logf("each limiter's last degraded decision after the failover began: %v", r.backEach)
	for k, kr := range r.keys {
		t.Logf("key %s: admitted %d (%d by the fallback, %d of them after the first limiter was back), bound %d, over %+d (lost writes %d, fallback %+d); acknowledged admissions the replica never saw %d",
			f.keys[k], kr.admitted, kr.degraded, kr.lateFallback, kr.bound, kr.over, kr.lost, kr.fallback, kr.lostRaw)
	}
	return r
}

// firstBack is the first limiter's return to Redis among back (see
// lastDegradedEach), -1 if none had degraded.
func firstBack(back []time.Duration) time.Duration {
	first := time.Duration(-1)
	for _, b := range back {
		if b >= 0 && (first < 0 || b < first) {
			first = b
		}
	}
	return first
}

// lastDegradedEach returns, for each limiter, when its last degraded
// decision ended, from at (the failover's start); -1 for none: the spread
// is how far apart the limiters went back to Redis.
func lastDegradedEach(all []foDecision, at time.Duration) []time.Duration {
	last := make([]time.Duration, foInstances)
	for i := range last {
		last[i] = -1
	}
	for _, d := range all {
		if d.degraded && d.start >= at {
			last[d.inst] = max(last[d.inst], (d.end - at).Round(time.Millisecond))
		}
	}
	return last
}

// accountKey splits one key's over-admission in two: lost writes, the
// admissions by Redis that a bucket fed every one of Redis's admissions
// would have refused (Redis forgot some of its own writes); and the rest,
// which comes from deciding outside Redis: the fallback's admissions, which
// Redis never counts, so that its bucket refills under them. ds is sorted
// by end.
func accountKey(ds []foDecision, limit core.Limit) foKeyResult {
	kr := foKeyResult{lostRaw: -1}
	if len(ds) == 0 {
		return kr
	}
	first, last := ds[0].start, ds[0].end
	p := limit.Period / time.Duration(limit.Rate) // one token
	var tat time.Duration                         // a bucket fed only Redis's admissions
	for _, d := range ds {
		first, last = min(first, d.start), max(last, d.end)
		if !d.allowed {
			continue
		}
		kr.admitted++
		if d.degraded {
			kr.degraded++
			continue
		}
		// Redis decided at an instant between d.start and d.end.
		// Checking at d.end, and moving the bucket as if at d.start,
		// gives every admission the benefit of the doubt: the bucket here
		// never refuses one that Redis, keeping every write, would have
		// admitted. Half a token more absorbs clock jitter.
		if max(tat, d.end)+p-d.end > time.Duration(limit.Burst)*p+p/2 {
			kr.lost++ // a bucket that kept every write would have refused it
			continue
		}
		tat = max(tat, d.start) + p
	}
	t := last - first
	kr.bound = limit.Burst + int(int64(t)*int64(limit.Rate)/int64(limit.Period)) + 1
	kr.over = kr.admitted - kr.bound
	kr.fallback = kr.over - kr.lost
	return kr
}

// lostAcknowledged counts key k's admissions that Redis acknowledged before
// the kill and the replica never saw: each admission moves the bucket's
// theoretical arrival time (TAT) at least one token later, and its answer
// says where (ResetAfter is TAT minus Redis's clock, which is this
// machine's), so those whose TAT lies beyond the replica's, by more than
// half a token of timing slack, never reached it.
func lostAcknowledged(ds []foDecision, ev foEvent, t0 time.Time, frozen map[int]int64, k int, limit core.Limit) int {
	rep, ok := frozen[k]
	if !ok {
		rep = 0 // no bucket on the replica: every admission is lost
	}
	half := (limit.Period / time.Duration(limit.Rate) / 2).Microseconds()
	n := 0
	for _, d := range ds {
		if !d.allowed || d.degraded || d.start >= ev.at {
			continue
		}
		tat := t0.Add(d.start).UnixMicro() + d.reset.Microseconds()
		if tat > rep+half {
			n++
		}
	}
	return n
}

// replicaOf returns the address of the replica of the master at addr.
func replicaOf(t *testing.T, c *redistest.Cluster, master string) string {
	t.Helper()
	_, port, _ := strings.Cut(master, ":")
	for _, a := range c.Addrs() {
		info, err := redistest.NewClient(t, a).Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+port+"\r\n") {
			return a
		}
	}
	t.Fatalf("no replica of %s", master)
	return ""
}

// sentinelDefaultClient returns a failover client with go-redis's defaults,
// but for the context deadlines the limiter requires, closed at the end of
// the test.
func sentinelDefaultClient(t *testing.T, s *redistest.Sentinel) redis.UniversalClient {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            s.MasterName(),
		SentinelAddrs:         s.SentinelAddrs(),
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() {
		_ = rdb.Close()
		drainRedisDials()
	})
	return rdb
}

// drainRedisDials waits, up to 3s, until no go-redis pool is re-dialing a
// dead node (it notices Close only after its next attempt), so that the
// goroutine leak check at the end of the tests does not trip over it.
func drainRedisDials() {
	deadline := time.Now().Add(3 * time.Second)
	buf := make([]byte, 1<<20)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte("internal/pool.(*ConnPool).tryDial")) {
			return
		}
		pause(20 * time.Millisecond) // polling for a condition, with a deadline
	}
}

// foTable formats the measured rows as a markdown table.
func foTable(order []string, results map[string][]foResult) string {
	var b strings.Builder
	b.WriteString("| scenario | over-admission per key, median / worst | lost-writes term | acknowledged admissions the promoted replica never saw | fallback term | fallback admissions per key | kill to first degraded decision | kill to last degraded decision | kill to new master serving | WAIT misses per run |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range order {
		rs := results[row]
		if len(rs) == 0 {
			continue
		}
		var over, lost, raw, fb, deg []int
		var first, back, promoted []time.Duration
		var misses []int64
		for _, r := range rs {
			for _, k := range r.keys {
				over = append(over, k.over)
				lost = append(lost, k.lost)
				fb = append(fb, k.fallback)
				deg = append(deg, k.degraded)
				if k.lostRaw >= 0 {
					raw = append(raw, k.lostRaw)
				}
			}
			if r.firstDegraded >= 0 {
				first = append(first, r.firstDegraded)
				back = append(back, r.backAt)
			}
			promoted = append(promoted, r.promoted)
			misses = append(misses, r.misses)
		}
		rawCell := "n/a (old master stays up)"
		if len(raw) > 0 {
			rawCell = medWorst(raw)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", row, medWorst(over), medWorst(lost), rawCell,
			medWorst(fb), medWorst(deg), durRange(first, len(rs)), durRange(back, len(rs)), durRange(promoted, len(rs)), int64Range(misses))
	}
	return b.String()
}

func medWorst(xs []int) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	return fmt.Sprintf("%d / %d", s[len(s)/2], s[len(s)-1])
}

func durRange(ds []time.Duration, runs int) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	out := fmt.Sprintf("%.2f–%.2fs", s[0].Seconds(), s[len(s)-1].Seconds())
	if len(ds) < runs {
		out += fmt.Sprintf(" (%d of %d runs)", len(ds), runs)
	}
	return out
}

func int64Range(xs []int64) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	if s[0] == s[len(s)-1] {
		return strconv.FormatInt(s[0], 10)
	}
	return fmt.Sprintf("%d–%d", s[0], s[len(s)-1])
}

// The WAIT cost benchmark's shape.
const (
	costCallers = 64
	costRound   = 2 * time.Second
)

// costResult is one round of one mode.
type costResult struct {
	rate     float64 // decisions per second
	p50, p99 time.Duration
	misses   int64
	degraded int64
}

// waitCost measures decisions per second with and without WithReplicaAck
// on one Sentinel deployment, in rounds that alternate the two, and
// returns a table of the medians.
func waitCost(t *testing.T, rounds int) string {
	s := redistest.StartSentinel(t)
	mk := func(ack bool) *core.Limiter {
		opts := []core.Option{core.WithTimeout(foBudget), core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
		if ack {
			opts = append(opts, core.WithReplicaAck(1, foAckTimeout))
		}
		rdb := sentinelDefaultClient(t, s)
		warmClient(t, rdb)
		lim, err := core.New(rdb, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	lims := map[bool]*core.Limiter{false: mk(false), true: mk(true)}
	got := map[bool][]costResult{}
	for round := range rounds {
		for _, ack := range []bool{false, true} {
			if round%2 == 1 {
				ack = !ack // alternate which mode goes first
			}
			r := costRun(lims[ack], fmt.Sprintf("r%d-%v", round, ack))
			got[ack] = append(got[ack], r)
			t.Logf("round %d, WAIT %v: %.0f decisions/s, p50 %v, p99 %v, %d misses, %d degraded", round+1, ack, r.rate, r.p50, r.p99, r.misses, r.degraded)
		}
	}
	med := func(rs []costResult) costResult {
		rates, p50s, p99s := make([]float64, len(rs)), make([]time.Duration, len(rs)), make([]time.Duration, len(rs))
		var m costResult
		for i, r := range rs {
			rates[i], p50s[i], p99s[i] = r.rate, r.p50, r.p99
			m.misses += r.misses
			m.degraded += r.degraded
		}
		slices.Sort(rates)
		slices.Sort(p50s)
		slices.Sort(p99s)
		m.rate, m.p50, m.p99 = rates[len(rs)/2], p50s[len(rs)/2], p99s[len(rs)/2]
		return m
	}
	off, on := med(got[false]), med(got[true])
	var b strings.Builder
	b.WriteString("| | decisions/s (median of rounds) | p50 | p99 | WAIT misses (all rounds) | degraded (all rounds) |\n|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| no WAIT | %.0f | %v | %v | - | %d |\n", off.rate, off.p50.Round(time.Microsecond), off.p99.Round(time.Microsecond), off.degraded)
	fmt.Fprintf(&b, "| WithReplicaAck(1, %v) | %.0f | %v | %v | %d | %d |\n", foAckTimeout, on.rate, on.p50.Round(time.Microsecond), on.p99.Round(time.Microsecond), on.misses, on.degraded)
	fmt.Fprintf(&b, "\nratio WAIT / no WAIT: %.2f (%d rounds each, interleaved)\n", on.rate/off.rate, rounds)
	return b.String()
}

// costRun has costCallers goroutines decide on keys of their own, every one
// admitted (so every call writes), for costRound.
func costRun(lim *core.Limiter, tag string) costResult {
	limit := core.Limit{Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}
	misses0 := lim.ReplicaAckMisses()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lat []time.Duration
	var n, degraded atomic.Int64
	stop := time.Now().Add(costRound)
	start := time.Now()
	for c := range costCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, 4096)
			ctx := context.Background()
			for i := 0; ; i++ {
				t0 := time.Now()
				if t0.After(stop) {
					break
				}
				res, err := lim.Allow(ctx, fmt.Sprintf("%s-%d-%d", tag, c, i%64), limit)
				mine = append(mine, time.Since(t0))
				if err == nil && res.Degraded {
					degraded.Add(1)
				}
				n.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	slices.Sort(lat)
	return costResult{
		rate:     float64(n.Load()) / took.Seconds(),
		p50:      lat[len(lat)/2],
		p99:      lat[len(lat)*99/100],
		misses:   lim.ReplicaAckMisses() - misses0,
		degraded: degraded.Load(),
	}
}
