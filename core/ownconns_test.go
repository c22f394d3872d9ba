package core

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/redistest"
)

// scriptCalls is a go-redis hook counting the script calls (EVALSHA and
// EVAL, alone or in pipelines) that go through its client.
type scriptCalls struct{ n atomic.Int64 }

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

func (h *scriptCalls) count(cmd redis.Cmder) {
	if name := cmd.Name(); name == "evalsha" || name == "eval" {
		h.n.Add(1)
	}
}

// ownLimiter returns a limiter on a client of its own to addr, with or
// without WithOwnConnections, ready (connections open, scripts loaded),
// and the hook counting the script calls that go through its client
// after Ready.
func ownLimiter(t *testing.T, addr string, own bool, edit func(*redis.Options), opts ...Option) (*Limiter, *redis.Client, *scriptCalls) {
	t.Helper()
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second, DialerRetries: 1}
	if edit != nil {
		edit(o)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	h := new(scriptCalls)
	rdb.AddHook(h)
	lim, err := New(rdb, append([]Option{
		WithPrefix(fmt.Sprintf("sluicetest:%s:%v:%d:", t.Name(), own, time.Now().UnixNano())),
		WithTimeout(10 * time.Second),
		WithFallbackReplicas(1),
		WithOwnConnections(own),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	if err := lim.Ready(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.n.Store(0)
	return lim, rdb, h
}

// TestOwnConnectionsAgree makes the same decisions with and without
// WithOwnConnections on one real Redis: the same answers, every one from
// Redis; with it, none of the script calls goes through the client (its
// hook sees none), without it every one does. The decisions cover the
// plain one (one unit, one limit), several units, two limits on a key,
// and a peek.
func TestOwnConnectionsAgree(t *testing.T) {
	addr := redistest.Start(t).Addr()
	hourly := Limit{Rate: 3, Period: time.Hour, Burst: 3}
	minute := Limit{Rate: 2, Period: time.Minute, Burst: 2}
	steps := []struct {
		name string
		do   func(ctx context.Context, l *Limiter) (Result, error)
	}{
		{"plain", func(ctx context.Context, l *Limiter) (Result, error) { return l.Allow(ctx, "a", hourly) }},
		{"units", func(ctx context.Context, l *Limiter) (Result, error) { return l.AllowN(ctx, "b", 2, hourly) }},
		{"two limits", func(ctx context.Context, l *Limiter) (Result, error) { return l.Allow(ctx, "c", hourly, minute) }},
		{"peek", func(ctx context.Context, l *Limiter) (Result, error) { return l.Peek(ctx, "a", hourly) }},
	}
	type answer struct {
		Allowed, Degraded bool
		Remaining         int
	}
	run := func(own bool) ([]answer, int64) {
		lim, _, h := ownLimiter(t, addr, own, nil, WithDenyCache(false))
		var out []answer
		for range 4 {
			for _, s := range steps {
				res, err := s.do(t.Context(), lim)
				if err != nil {
					t.Fatalf("own %v, %s: %v", own, s.name, err)
				}
				if res.Degraded {
					t.Fatalf("own %v, %s: decided without Redis: %+v", own, s.name, res)
				}
				out = append(out, answer{res.Allowed, res.Degraded, res.Remaining})
			}
		}
		return out, h.n.Load()
	}
	pooled, viaClient := run(false)
	owned, viaClientOwned := run(true)
	if fmt.Sprint(pooled) != fmt.Sprint(owned) {
		t.Fatalf("answers differ:\nthrough the pool %v\non own connections %v", pooled, owned)
	}
	if viaClient != int64(len(pooled)) {
		t.Fatalf("through the pool, the client's hook saw %d script calls for %d decisions", viaClient, len(pooled))
	}
	if viaClientOwned != 0 {
		t.Fatalf("with WithOwnConnections, the client's hook saw %d script calls, want none", viaClientOwned)
	}
}

// TestOwnConnectionsBatches: on a single server, decisions made at once
// by many callers (batched, and alone when a slot is free) all travel on
// the limiter's own connections, as many as its round trips in flight,
// and each key is admitted exactly its burst.
func TestOwnConnectionsBatches(t *testing.T) {
	addr := redistest.Start(t).Addr()
	lim, _, h := ownLimiter(t, addr, true, nil, WithDenyCache(false))
	limit := Limit{Rate: 5, Period: time.Hour, Burst: 5}
	const callers, keys, asks = 32, 8, 10
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range asks {
				k := (c + i) % keys
				res, err := lim.Allow(t.Context(), fmt.Sprintf("k%d", k), limit)
				if err != nil || res.Degraded {
					t.Errorf("Allow = %+v, %v", res, err)
					return
				}
				if res.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range admitted {
		if n := admitted[k].Load(); n != int64(limit.Burst) {
			t.Errorf("key k%d admitted %d, want exactly %d", k, n, limit.Burst)
		}
	}
	if n := h.n.Load(); n != 0 {
		t.Fatalf("%d script calls went through the client, want none", n)
	}
}

// TestOwnConnectionsRecover: what befalls a connection behind the
// limiter's back costs no decision its answer from Redis. After each
// event the next decisions are all Redis's, and go back to the limiter's
// own connections.
func TestOwnConnectionsRecover(t *testing.T) {
	srv := redistest.Start(t)
	admin := redistest.NewClient(t, srv.Addr())
	events := []struct {
		name string
		do   func(ctx context.Context) error
	}{
		// Every connection closed by the server: found dead before any
		// reply, the call goes through the client, which checks its own.
		{"CLIENT KILL", func(ctx context.Context) error {
			return admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err()
		}},
		// The script forgotten: NOSCRIPT, sent whole through the client.
		{"SCRIPT FLUSH", func(ctx context.Context) error { return admin.ScriptFlush(ctx).Err() }},
	}
	lim, _, h := ownLimiter(t, srv.Addr(), true, nil, WithDenyCache(false))
	lot := PerSecond(1_000_000)
	ctx := t.Context()
	for _, ev := range events {
		t.Run(ev.name, func(t *testing.T) {
			if res, err := lim.Allow(ctx, "k", lot); err != nil || res.Degraded {
				t.Fatalf("before: %+v, %v", res, err)
			}
			if err := ev.do(ctx); err != nil {
				t.Fatal(err)
			}
			before := h.n.Load()
			for i := range 20 {
				if res, err := lim.Allow(ctx, "k", lot); err != nil || res.Degraded {
					t.Fatalf("decision %d after %s: %+v, %v", i, ev.name, res, err)
				}
			}
			if through := h.n.Load() - before; through > 2 {
				t.Fatalf("%d of 20 decisions after %s went through the client, want at most 2 (then back on the own connections)", through, ev.name)
			}
		})
	}
}

// TestOwnConnectionsSetUp: the limiter's own connections are set up as the
// client's are (password, database, name), and Close closes them.
func TestOwnConnectionsSetUp(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret")
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "s3cret", DB: 5})
	defer admin.Close()
	name := fmt.Sprintf("own-%d", time.Now().UnixNano())
	lim, rdb, h := ownLimiter(t, srv.Addr(), true, func(o *redis.Options) {
		o.Password, o.DB, o.ClientName = "s3cret", 5, name
	})
	ctx := t.Context()
	res, err := lim.Allow(ctx, "k", PerSecond(10))
	if err != nil || res.Degraded {
		t.Fatalf("Allow = %+v, %v", res, err)
	}
	if n := h.n.Load(); n != 0 {
		t.Fatalf("the decision went through the client (%d script calls)", n)
	}
	keys, err := admin.Keys(ctx, "sluicetest:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("no key of the limiter in database 5: %v, %v", keys, err)
	}
	named := func() int {
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(list, " name="+name+" ")
	}
	_ = rdb.Close()
	// The client's connections are closed; what is left with the
	// name is the limiter's own, until it is closed.
	if named() == 0 {
		t.Fatal("no connection of the limiter's own carries the client's name")
	}
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for named() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d named connections still open 5s after Close", named())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOwnConnectionsRefused: New names what keeps the limiter from
// reproducing the client's connections.
func TestOwnConnectionsRefused(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", OnConnect: func(context.Context, *redis.Conn) error { return nil }})
	defer rdb.Close()
	if _, err := New(rdb, WithOwnConnections(true)); err == nil || !strings.Contains(err.Error(), "OnConnect") {
		t.Fatalf("New with an OnConnect hook = %v, want an error naming OnConnect", err)
	}
	lim, err := New(rdb, WithOwnConnections(false))
	if err != nil {
		t.Fatalf("New without own connections = %v", err)
	}
	_ = lim.Close()
}
