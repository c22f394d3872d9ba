package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/redistest"
)

// A loss is one way Redis forgets: a restart without persistence, a
// failover that loses the last writes (a replica whose link to the master
// is cut is promoted, and the clients' address leads to it: see
// failoverLosing), and an eviction (emulated: the key deleted, as a
// policy that can evict it would).
type loss struct {
	name string
	// before is called before the writes the loss may lose; it returns
	// the loss itself.
	before func(t *testing.T, env *forgetEnv, keys func() []string) func()
}

var losses = []loss{
	{"restart", func(_ *testing.T, env *forgetEnv, _ func() []string) func() {
		return func() { env.srv.Kill(); env.srv.Restart() }
	}},
	{"lost-write failover", func(t *testing.T, env *forgetEnv, _ func() []string) func() {
		promote, _ := failoverLosing(t, env.srv, env.front)
		return promote
	}},
	{"eviction", func(t *testing.T, env *forgetEnv, keys func() []string) func() {
		return func() {
			if err := env.rdb.Del(context.Background(), keys()...).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}},
}

// failoverLosing starts a replica of master, waits until it holds what
// master holds, and cuts its link: it hears of no write from then on. The
// returned func is the failover: the replica is promoted, and front (the
// clients' one address, as a Sentinel client or a DNS name gives them)
// leads to it, its connections to the old master reset. The replica's
// address is returned too.
func failoverLosing(t *testing.T, master *redistest.Server, front *redistest.Proxy) (promote func(), replicaAddr string) {
	t.Helper()
	ctx := context.Background()
	replica := redistest.Start(t)
	mc, rc := redistest.NewClient(t, master.Addr()), redistest.NewClient(t, replica.Addr())
	// Two servers that started in the same second and never saved answer
	// LASTSAVE alike, and the lease scripts would not read INFO to tell
	// them apart (docs/topologies.md): a replica that has saved since
	// differs.
	for {
		ms, err1 := mc.LastSave(ctx).Result()
		rs, err2 := rc.LastSave(ctx).Result()
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if ms != rs {
			break
		}
		time.Sleep(100 * time.Millisecond)
		if err := rc.Save(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	link := redistest.NewProxy(t, master.Addr())
	host, port, _ := net.SplitHostPort(link.Addr())
	// A diskless sync waits 5s for more replicas by default.
	if err := mc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := rc.Info(ctx, "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not sync:\n%s", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Everything master has taken so far has reached the replica.
	if n, err := mc.Wait(ctx, 1, 5000).Result(); err != nil || n < 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	link.SetBlackhole(true)
	return func() {
		if err := rc.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
			t.Fatal(err)
		}
		front.SetTarget(replica.Addr())
	}, replica.Addr()
}

// forgetEnv is one cell's private server, the clients' address in front
// of it (a proxy, which a failover points at the promoted replica), a
// client of the server itself, and the key prefix.
type forgetEnv struct {
	srv    *redistest.Server
	front  *redistest.Proxy
	rdb    *redis.Client
	prefix string
}

// forgetRow measures one kind of key under one loss, and returns the
// table's cell.
type forgetRow struct {
	kind    string
	measure func(t *testing.T, l loss) string
}

// forgetSetup starts a private server and returns its env and a limiter
// maker (each limiter with its own client of env.front, closed at
// cleanup).
func forgetSetup(t *testing.T) (*forgetEnv, func(opts ...Option) *Limiter) {
	srv := redistest.Start(t)
	env := &forgetEnv{srv: srv, front: redistest.NewProxy(t, srv.Addr()), rdb: redistest.NewClient(t, srv.Addr()), prefix: "fg:"}
	mk := func(opts ...Option) *Limiter {
		lim := newRedisLimiter(t, env.front.Addr(), append([]Option{WithPrefix(env.prefix), WithTimeout(200 * time.Millisecond),
			WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
		t.Cleanup(func() { _ = lim.Close() })
		return lim
	}
	return env, mk
}

// bucketAfterLoss empties a bucket of limit (burst b, slow refill) by one
// replica, loses it, and counts what another replica is admitted in 3b
// tries at once after the loss (the first one's deny cache would refuse
// them without asking Redis).
func bucketAfterLoss(t *testing.T, l loss, limit Limit, opts ...Option) string {
	env, mk := forgetSetup(t)
	lim, other := mk(opts...), mk(opts...)
	ctx := context.Background()
	p, err := lim.plans.get([]Limit{limit})
	if err != nil {
		t.Fatal(err)
	}
	rkey := redisOf(lim).RKey(p.FP, "k")
	forget := l.before(t, env, func() []string { return []string{rkey} })
	before := 0
	for range 3 * limit.Burst {
		if r, err := lim.Allow(ctx, "k", limit); err == nil && r.Allowed {
			before++
		}
	}
	forget()
	waitRedis(t, other, limit)
	after := 0
	for range 3 * limit.Burst {
		if r, err := other.Allow(ctx, "k", limit); err == nil && r.Allowed && !r.Degraded {
			after++
		}
	}
	return fmt.Sprintf("%d of %d admitted again (burst %d)", after, before, limit.Burst)
}

// quotaAfterLoss spends a monthly quota of 30 by three replicas (10
// each), loses it, and counts what the same replicas are admitted in 30
// tries each after the loss (see TestCalendarQuotaAcrossRestart).
func quotaAfterLoss(t *testing.T, l loss) string {
	env, mk := forgetSetup(t)
	quota := PerCalendarMonth(30, "UTC")
	var lims []*Limiter
	for range 3 {
		lims = append(lims, mk(WithDenyCache(false)))
	}
	p, err := lims[0].plans.get([]Limit{quota})
	if err != nil {
		t.Fatal(err)
	}
	rkey := redisOf(lims[0]).RKey(p.FP, "k")
	forget := l.before(t, env, func() []string { return []string{rkey} })
	ctx := context.Background()
	before := 0
	for _, lim := range lims {
		for range 10 {
			if r, err := lim.Allow(ctx, "k", quota); err == nil && r.Allowed && !r.Degraded {
				before++
			}
		}
	}
	forget()
	for _, lim := range lims {
		waitRedis(t, lim, quota)
	}
	after := 0
	for range 30 {
		for _, lim := range lims {
			if r, err := lim.Allow(ctx, "k", quota); err == nil && r.Allowed && !r.Degraded {
				after++
			}
		}
	}
	return fmt.Sprintf("%d admitted after the loss (%d before)", after, before)
}

// waitRedis waits until the limiter decides by Redis again (a probe key).
func waitRedis(t *testing.T, lim *Limiter, limit Limit) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := lim.Allow(context.Background(), "probe", PerSecond(1000)); err == nil && !r.Degraded {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the limiter did not return to Redis within 5s")
}

var forgetRows = []forgetRow{
	{"bucket (`PerMinute(10)`)", func(t *testing.T, l loss) string {
		return bucketAfterLoss(t, l, PerMinute(10))
	}},
	{"stepped quota (`PerInterval(10, time.Hour)`)", func(t *testing.T, l loss) string {
		return bucketAfterLoss(t, l, PerInterval(10, time.Hour))
	}},
	{"calendar quota (`PerCalendarMonth(30, \"UTC\")`), three replicas 10 each, all alive", func(t *testing.T, l loss) string {
		return quotaAfterLoss(t, l)
	}},
	{"penalty lock (`PerMinute(2)`, `WithPenalty(time.Hour)`)", func(t *testing.T, l loss) string {
		return bucketAfterLoss(t, l, PerMinute(2), WithPenalty(time.Hour))
	}},
	{"concurrency lease set (cap 10, lease 1s)", func(t *testing.T, l loss) string {
		env, mk := forgetSetup(t)
		a, b := mk(), mk(WithFailurePolicy(FailClosed))
		ca, _ := a.PrepareConcurrency(ConcurrencyLimit{Name: "s", Max: 10, Lease: time.Second})
		cb, _ := b.PrepareConcurrency(ConcurrencyLimit{Name: "s", Max: 10, Lease: time.Second})
		ctx := context.Background()
		if ls, err := cb.Acquire(ctx, "k"); err != nil || !ls.Acquired { // b meets the node
			t.Fatalf("%+v %v", ls, err)
		} else {
			_ = ls.Release(ctx)
		}
		forget := l.before(t, env, func() []string { return []string{redisOf(a).RKey(ca.fp, "k")} })
		var held []*Lease
		for range 10 {
			ls, err := ca.Acquire(ctx, "k")
			if err != nil || !ls.Acquired {
				t.Fatalf("%+v %v", ls, err)
			}
			held = append(held, ls)
		}
		forget()
		taken := 0
		deadline := time.Now().Add(1500 * time.Millisecond)
		for time.Now().Before(deadline) {
			if ls, err := cb.Acquire(ctx, "k"); err == nil && ls.Acquired {
				taken++
			}
			time.Sleep(5 * time.Millisecond)
		}
		lost := 0
		for _, ls := range held {
			if err := ls.Release(ctx); err != nil {
				lost++
			}
		}
		return fmt.Sprintf("%d in flight (%d newcomers); %d of the holder's 10 leases lost", 10+taken, taken, lost)
	}},
	{"overrides set, version and epoch", func(t *testing.T, l loss) string {
		env, mk := forgetSetup(t)
		a, b := mk(), mk()
		ctx := context.Background()
		oa, err := NewTestOverrides(a, "plans")
		if err != nil {
			t.Fatal(err)
		}
		defer oa.Close()
		ob, err := NewTestOverrides(b, "plans")
		if err != nil {
			t.Fatal(err)
		}
		defer ob.Close()
		if err := oa.Deny(ctx, "w"); err != nil {
			t.Fatal(err)
		}
		forget := l.before(t, env, func() []string {
			keys, _ := env.rdb.Keys(ctx, env.prefix+"{ovr:plans}*").Result()
			return keys
		})
		if err := oa.Deny(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		if err := ob.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		forget()
		var err2 error
		for range 50 { // through the breaker's recovery after a restart
			if err2 = oa.Deny(ctx, "y"); err2 == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err2 != nil {
			t.Fatal(err2)
		}
		if err := ob.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		hasX, hasY := ob.Has("x"), ob.Has("y")
		if hasY && !hasX {
			return "replica read the set again (lost entry gone, new entry in force)"
		}
		return fmt.Sprintf("**stale**: replica keeps the lost entry %v, sees the new one %v", hasX, hasY)
	}},
}

// TestForgetTable measures what each kind of key the library writes does
// when Redis forgets it (see losses), and prints the table published in
// docs/topologies.md ("What Redis forgets"). Each cell is one run on a
// private redis-server of its own. It is a measurement, so it runs only
// when asked (about a minute):
//
//	SLUICE_FORGET_TABLE=1 go test ./core -run TestForgetTable -v -count=1
func TestForgetTable(t *testing.T) {
	if os.Getenv("SLUICE_FORGET_TABLE") != "1" {
		t.Skip("a measurement; run it with SLUICE_FORGET_TABLE=1")
	}
	var mu sync.Mutex
	cells := map[string]string{}
	for _, row := range forgetRows {
		for _, l := range losses {
			t.Run(row.kind+"/"+l.name, func(t *testing.T) {
				c := row.measure(t, l)
				mu.Lock()
				cells[row.kind+"/"+l.name] = c
				mu.Unlock()
				t.Log(c)
			})
		}
	}
	var b strings.Builder
	b.WriteString("| key | restart | lost-write failover | eviction (the key deleted) |\n|---|---|---|---|\n")
	for _, row := range forgetRows {
		fmt.Fprintf(&b, "| %s |", row.kind)
		for _, l := range losses {
			fmt.Fprintf(&b, " %s |", cells[row.kind+"/"+l.name])
		}
		b.WriteString("\n")
	}
	t.Logf("\n%s", b.String())
}

// TestOverridesAfterLoss: after a restart, a failover that lost the last
// writes and an eviction of the set, a replica that had read the lost
// entry reads the set again at its next sync: the lost entry is gone and
// the entry written since is in force (the version carries the id of the
// last write, so a write after lost ones never repeats a version).
func TestOverridesAfterLoss(t *testing.T) {
	row := forgetRows[len(forgetRows)-1]
	for _, l := range losses {
		t.Run(l.name, func(t *testing.T) {
			if got := row.measure(t, l); !strings.HasPrefix(got, "replica read the set again") {
				t.Error(got)
			}
		})
	}
}
