package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	procpause "github.com/sluicehq/sluice/core/internal/pause"
	"github.com/sluicehq/sluice/redistest"
)

// TestReady: the readiness check's answer names the cause, in words, for
// each way a store can be unusable.
func TestReady(t *testing.T) {
	healthy := redistest.Start(t)
	protected := redistest.Start(t, "--requirepass", "s3cret")
	evicting := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	limited := redistest.Start(t)
	admin := redistest.NewClient(t, limited.Addr())
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "probe", "on", ">pw", "~*", "+ping", "+info", "+hello", "+client").Err(); err != nil {
		t.Fatal(err)
	}
	slow := redistest.NewProxy(t, healthy.Addr())
	slow.SetDelay(2 * time.Second)
	client := func(addr string, edit func(*redis.Options)) *redis.Client {
		o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, Protocol: 2}
		if edit != nil {
			edit(o)
		}
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	cases := []struct {
		name string
		rdb  *redis.Client
		want string // in the error; "" for ready
	}{
		{"healthy", client(healthy.Addr(), nil), ""},
		{"refused", client(refusedAddr(t), nil), "connection refused: nothing listens at the address"},
		{"no password", client(protected.Addr(), nil), "authentication failed"},
		{"wrong password", client(protected.Addr(), func(o *redis.Options) { o.Password = "wrong" }), "authentication failed"},
		{"password", client(protected.Addr(), func(o *redis.Options) { o.Password = "s3cret" }), ""},
		{"no script permission", client(limited.Addr(), func(o *redis.Options) { o.Username, o.Password = "probe", "pw" }), "lacks a permission"},
		{"timeout", client(slow.Addr(), nil), "no answer before the probe's deadline"},
		{"evicting policy", client(evicting.Addr(), nil), "maxmemory-policy allkeys-lru can evict"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lim, err := New(tc.rdb, WithLogger(quietLogger()))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err = lim.Ready(ctx)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Ready() = %v, want nil", err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("Ready() = nil, want an error saying %q", tc.want)
			case !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Ready() = %v, want an error wrapping ErrUnavailable saying %q", err, tc.want)
			default:
				t.Logf("Ready() = %v", err)
			}
		})
	}
}

// TestReadySaysWhatAQuotaNeeds: Ready logs once per node that keeps no
// append-only file, which a calendar or interval quota needs to survive a
// restart whole (docs/topologies.md, "Quotas across a loss"), and says
// nothing of a node that keeps one. Either node is ready.
func TestReadySaysWhatAQuotaNeeds(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		warn bool
	}{
		{"appendonly no", nil, true},
		{"appendonly yes", []string{"--appendonly", "yes"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			log := &syncWriter{w: &strings.Builder{}}
			lim, err := New(redistest.NewClient(t, srv.Addr()), WithLogger(slog.New(slog.NewTextHandler(log, nil))))
			if err != nil {
				t.Fatal(err)
			}
			defer lim.Close()
			for range 2 {
				if err := lim.Ready(context.Background()); err != nil {
					t.Fatalf("Ready() = %v, want nil", err)
				}
			}
			got := strings.Count(log.String(), "keeps no append-only file")
			switch {
			case tc.warn && got != 1:
				t.Fatalf("%d warnings after two Ready calls, want 1:\n%s", got, log.String())
			case !tc.warn && got != 0:
				t.Fatalf("a node with an append-only file was warned about:\n%s", log.String())
			}
			if tc.warn && !strings.Contains(log.String(), "appendonly yes") {
				t.Fatalf("the warning does not name the fix:\n%s", log.String())
			}
		})
	}
}

// TestReadyWarmsThePool: with Redis 120 ms away and a budget of 200 ms, a
// decision on a fresh connection pays the connection's handshake too (at
// least one more round trip: 240 ms) and outlives its budget; after Ready
// has warmed the pool, decisions from as many callers as the limiter keeps
// in flight find connections ready and none fails. The budget leaves a
// warm decision 80 ms to spare: the proxy runs in this process, so a
// process starved of CPU beside two hogs per core and paused now and then
// (under-load --stall) delays the "Redis" it sees too; with 50 ms to spare
// that failed 1 loaded run in 4, with 20 ms 1 in 3. A cold decision's
// shortfall is the proxy's delay, which no machine shortens.
func TestReadyWarmsThePool(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	proxy.SetDelay(120 * time.Millisecond)
	decide := func(lim *Limiter) int64 { return degradedAmong(t, lim, 12, 5) }
	fresh := func() *Limiter {
		lim, err := New(outageClient(t, proxy.Addr()), WithPrefix(uniquePrefix()), WithLogger(quietLogger()), WithTimeout(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	cold := degradedAll(t, fresh(), 12, 5)
	lim := fresh()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lim.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	warm := decide(lim)
	t.Logf("Redis 120 ms away, a 200 ms budget, 60 decisions from 12 callers: %d degraded on a cold pool, %d after Ready", cold, warm)
	if cold == 0 {
		t.Errorf("no decision degraded on a cold pool: the handshake fit in the budget, so this test cannot tell a warm pool from a cold one")
	}
	if warm != 0 {
		t.Errorf("%d decisions degraded after Ready warmed the pool, want none", warm)
	}
}

// TestReadyWarmsAnUnbatchedPool: with batching off every caller in flight
// holds a connection of its own, so Ready warms the whole pool, not the
// few connections batches would use: 16 callers, Redis 30 ms away, none
// of their decisions degraded after Ready (before: 69-70% failed, with 6
// connections warm for 16 callers). Delay and budget as in
// TestReadyWarmsThePool.
func TestReadyWarmsAnUnbatchedPool(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	// Far enough that a handshake and a call do not fit the budget, with
	// room for a busy machine's scheduling.
	proxy.SetDelay(120 * time.Millisecond)
	fresh := func(opts ...Option) *Limiter {
		lim, err := New(outageClient(t, proxy.Addr()), append([]Option{WithPrefix(uniquePrefix()), WithLogger(quietLogger()),
			WithBatching(0), WithTimeout(200 * time.Millisecond), WithFallbackReplicas(1)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lim.Close() })
		return lim
	}
	cold := degradedAll(t, fresh(), 16, 5)
	obs := newRecorder()
	lim := fresh(WithObserver(obs))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lim.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	warm := degradedAmong(t, lim, 16, 5)
	t.Logf("Redis 120 ms away, a 200 ms budget, batching off, 80 decisions from 16 callers: %d degraded on a cold pool, %d after Ready", cold, warm)
	if cold == 0 {
		t.Errorf("no decision degraded on a cold pool: the handshake fit in the budget, so this test cannot tell a warm pool from a cold one")
	}
	if warm != 0 {
		obs.mu.Lock()
		t.Errorf("%d of 80 decisions from 16 callers degraded after Ready with batching off, want none (store errors %v; breaker opened %d times)", warm, obs.errs, len(obs.degraded))
		obs.mu.Unlock()
	}
}

// TestOutageLogSaysRefused: with go-redis's default dialer, which retries
// a refused dial, the calls to a port nobody listens on end by the budget;
// the outage's log line still says the connection was refused.
func TestOutageLogSaysRefused(t *testing.T) {
	logs := &syncBuffer{}
	rdb := redis.NewClient(&redis.Options{Addr: refusedAddr(t), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	lim, err := New(rdb, WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := lim.Allow(context.Background(), "k", PerSecond(10)); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(logs.String(), "connection refused: nothing listens at the address") {
		t.Fatalf("the outage's log line does not say the connection was refused:\n%s", logs.String())
	}
}

// TestFarRedisRecoversFromABlip: with Redis 30 ms away, a connection's
// handshake (dial and HELLO, two round trips) and a decision (one more)
// do not fit the 50 ms budget. Once a blip has reset every connection
// Ready warmed, the limiter must not stay degraded because each new
// connection pays its handshake inside a decision's budget.
func TestFarRedisRecoversFromABlip(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	proxy.SetDelay(30 * time.Millisecond)
	lim, err := New(outageClient(t, proxy.Addr()), WithPrefix(uniquePrefix()), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lim.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	decide := func(rounds int) int64 { return degradedAmong(t, lim, 12, rounds) }
	if d := decide(5); d != 0 {
		t.Fatalf("%d decisions degraded after Ready, before the blip", d)
	}
	proxy.SetRefuse(true) // every connection reset
	decide(2)
	proxy.SetRefuse(false)
	// Let the breaker probe and the pool recover: decisions for up to 5 s,
	// until a round of 12 decisions has none degraded.
	deadline := time.Now().Add(5 * time.Second)
	var last int64 = -1
	for time.Now().Before(deadline) {
		// A round counts as recovered only with none degraded at all: a
		// round a pause overlapped says nothing either way.
		n, paused := degradedSplit(t, lim, 12, 1)
		if last = n + paused; last == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last != 0 {
		t.Fatalf("5 s after the blip, %d of 12 decisions still degraded: new connections pay their handshake inside the budget", last)
	}
	if d := decide(5); d != 0 {
		t.Errorf("%d of 60 decisions degraded after the recovery", d)
	}
}

// degradedAmong has callers goroutines make rounds decisions each on lim,
// every one on a key of its own, and returns how many were degraded, but
// for those a pause of this process overlapped: a call whose budget the
// pause ate says nothing of the pool (one budget per call). Nor do a
// caller's next decisions until one is answered: the pause's timeout cost
// that caller its connection (go-redis drops a connection whose reply is
// late), so they pay a new one's handshake, which a pool warmed before
// the pause cannot spare them.
func degradedAmong(t *testing.T, lim *Limiter, callers, rounds int) int64 {
	t.Helper()
	n, _ := degradedSplit(t, lim, callers, rounds)
	return n
}

// degradedAll is degradedAmong with those a pause overlapped, or followed
// on their caller's lost connection, counted too: how many decisions a
// cold pool degraded, whatever else the process went through.
func degradedAll(t *testing.T, lim *Limiter, callers, rounds int) int64 {
	t.Helper()
	n, paused := degradedSplit(t, lim, callers, rounds)
	return n + paused
}

// degradedSplit is degradedAmong, with the degraded decisions a pause of
// this process overlapped counted apart (paused).
func degradedSplit(t *testing.T, lim *Limiter, callers, rounds int) (n, paused int64) {
	t.Helper()
	var clear, overlapped atomic.Int64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			lost := false // a pause cost this caller its connection
			for j := range rounds {
				ps := procpause.Now()
				res, err := lim.Allow(context.Background(), fmt.Sprintf("k%d-%d", i, j), PerSecond(100))
				if err != nil {
					t.Error(err)
					return
				}
				switch {
				case !res.Degraded:
					lost = false
				case procpause.Overlaps(ps, procpause.Now()):
					lost = true
					overlapped.Add(1)
				case lost:
					overlapped.Add(1)
				default:
					clear.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return clear.Load(), overlapped.Load()
}
