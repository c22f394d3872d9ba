package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/sluicehq/sluice/redistest"
)

// aclCommands are the commands a limiter's Redis user needs, beside the
// key pattern ~<prefix>*: the list in docs/production.md ("Redis
// permissions"), where each is tied to the feature that needs it. WAIT
// (WithReplicaAck) is not exercised here: it needs a replica.
var aclCommands = []string{
	"evalsha", "eval", // every script; EVAL after NOSCRIPT
	"time", "get", "set", // decisions, Wait, Reserve/Settle, Peek
	"del",                                                            // Reset
	"zadd", "zcard", "zrem", "zremrangebyscore", "zscore", "pexpire", // Acquire/Release, renewals; WithFleet (no zscore)
	"zcount",                               // Concurrency.InFlight
	"pttl",                                 // a penalty lock on a value without an expiry (clamped)
	"zrangebyscore", "persist", "lastsave", // Acquire/Release, renewals: clamped scores, sets without expiry, restarts noticed
	"hexists", "hlen", "hset", "hdel", "hgetall", "incr", // overrides (replicas read with get, hlen, hgetall)
	"ping", "info", "script|load", // Ready
	"zincrby", "hincrby", "zrange", // WithTopTalkers: flushes (with hset, pexpire), Limiter.Top (with hgetall)
	"hmget", // WithTokenLeases (with hset, hdel, zadd, zrem, zrange, zrangebyscore, pexpire)
}

// warnings records the limiter's log lines at Warn and above.
type warnings = testkit.Warnings

// startACL starts a redis-server whose only user, "sluice", may run
// commands on keys under prefix, and returns a client logged in as it.
func startACL(t *testing.T, prefix, password string, commands []string) *redis.Client {
	t.Helper()
	// An append-only file, as production keeps for quotas: without one,
	// Ready logs a warning, which runFeatures counts as a failure.
	args := []string{"--appendonly", "yes", "--user", "default", "off", "--user", "sluice", "on", ">" + password, "~" + prefix + "*", "resetchannels", "-@all"}
	for _, c := range commands {
		args = append(args, "+"+c)
	}
	srv := redistest.Start(t, args...)
	rdb := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), Username: "sluice", Password: password,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		DialerRetries: 1, MaxRetries: -1, ContextTimeoutEnabled: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// featureFailure is one feature that failed in runFeatures: its name and
// its error, or a warning the limiter logged (err nil).
type featureFailure struct {
	what string
	err  error
}

func (f featureFailure) String() string {
	if f.err == nil {
		return f.what
	}
	return fmt.Sprintf("%s: %v", f.what, f.err)
}

// runFeatures runs the engine's features against rdb and returns the
// failures: errors, degraded decisions and warnings logged.
func runFeatures(t *testing.T, rdb *redis.Client, prefix string) []featureFailure {
	t.Helper()
	var failed []featureFailure
	fail := func(what string, err error) {
		if err != nil {
			failed = append(failed, featureFailure{what, err})
		}
	}
	log := &warnings{}
	opts := []Option{WithPrefix(prefix), WithTimeout(5 * time.Second), WithLogger(slog.New(log)),
		WithFleet(Fleet{Name: "acl", Heartbeat: 100 * time.Millisecond}), WithTopTalkers(TopTalkers{})}
	lim, err := New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	degraded := func(what string, res Result, err error) {
		if err == nil && res.Degraded {
			err = errors.New("decided by the fallback")
		}
		fail(what, err)
	}
	limit := PerSecond(100)

	fail("Ready", lim.Ready(ctx))
	res, err := lim.Allow(ctx, "acl:allow", limit)
	degraded("Allow", res, err)
	res, err = lim.Wait(ctx, "acl:wait", 1, limit)
	degraded("Wait", res, err)
	res, err = lim.Peek(ctx, "acl:allow", limit)
	degraded("Peek", res, err)
	fail("Reset", lim.Reset(ctx, "acl:allow", limit))
	res, err = lim.Allow(ctx, "acl:top", limit.WithName("acl"))
	degraded("Allow (top talkers)", res, err)
	fail("top talkers' flush", lim.plans.top.flush(ctx))
	_, err = lim.Top(ctx, "acl", 3)
	fail("Top", err)
	_, err = lim.PeekMany(ctx, []string{"acl:allow", "acl:wait"}, limit)
	fail("PeekMany", err)
	if pr, err := lim.PreparePath("acl", Level{Name: "org", Limits: []Limit{PerCalendarMonth(100, "UTC")}}, Level{Name: "user", Limits: []Limit{limit}}); err != nil {
		t.Fatal(err)
	} else {
		_, err = pr.Allow(ctx, "acl:org", "u")
		fail("PathRule.Allow", err)
		_, err = pr.Peek(ctx, "acl:org", "u")
		fail("PathRule.Peek", err)
		fail("PathRule.Reset", pr.Reset(ctx, "acl:org", "u"))
	}

	if rule, err := lim.Prepare(PerSecond(100000)); err != nil {
		t.Fatal(err)
	} else if hot, err := rule.WithTokenLeases(LeaseBound{Fraction: 0.01}); err != nil {
		t.Fatal(err)
	} else {
		// Hot enough to take leases within a few calls: takes, renewals,
		// and the give back at Close below.
		for range 2000 {
			if res, err := hot.Allow(ctx, "acl:lease"); err != nil || res.Degraded {
				degraded("Allow (token leases)", res, err)
				break
			}
		}
	}
	if rule, err := lim.Prepare(limit); err != nil {
		t.Fatal(err)
	} else if rv, err := rule.Reserve(ctx, "acl:reserve", 5); err != nil {
		fail("Reserve", err)
	} else {
		fail("Settle", rv.Settle(ctx, 2))
	}

	if c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 2, Lease: time.Second}); err != nil {
		t.Fatal(err)
	} else if ls, err := c.Acquire(ctx, "acl:lease"); err != nil {
		fail("Acquire", err)
	} else {
		// The holder renews every Lease/3 (ZSCORE, PEXPIRE): hold it
		// through one renewal.
		time.Sleep(500 * time.Millisecond) // real time: the renewal is a timer in the engine
		_, err = c.InFlight(ctx, "acl:lease")
		fail("InFlight", err)
		fail("Release", ls.Release(ctx))
	}

	// Package overrides (which imports this one) sends its calls through
	// what the limiter lends it: the same scripts and commands.
	ov := lentOf(lim)
	_, err = ov.SetOverride(ctx, "acl", "tenant:a", "5/m", 100_000)
	fail("Overrides.Set", err)
	_, err = ov.SetOverride(ctx, "acl", "203.0.113.0/24", "deny", 100_000)
	fail("Overrides.Set deny", err)
	_, err = ov.RemoveOverride(ctx, "acl", "tenant:a")
	fail("Overrides.Remove", err)
	_, err = ov.LoadOverrides(ctx, "acl", "", 100_000)
	fail("Overrides.Sync", err)

	// The fleet: each limiter counts the other.
	deadline := time.Now().Add(5 * time.Second)
	for lim.FleetSize() < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := lim.FleetSize(); n < 2 {
		fail("WithFleet", fmt.Errorf("FleetSize = %d, want 2", n))
	}
	fail("Close", lim.Close())
	fail("Close", other.Close())
	for _, l := range log.Lines() {
		failed = append(failed, featureFailure{what: "logged: " + l})
	}
	return failed
}

// joinFailures formats failures one to a line, for messages.
func joinFailures(failed []featureFailure) string {
	lines := make([]string, len(failed))
	for i, f := range failed {
		lines[i] = f.String()
	}
	return strings.Join(lines, "\n")
}

// TestLeastPrivilegeACL runs the engine's features as a Redis user that has
// exactly the commands docs/production.md lists, and nothing else: a new
// command in a script or a new call fails it with NOPERM. It also checks
// that the test notices a missing command.
func TestLeastPrivilegeACL(t *testing.T) {
	const password = "acl-pw-7d1e"
	t.Run("documented commands", func(t *testing.T) {
		prefix := "aclok:"
		if failed := runFeatures(t, startACL(t, prefix, password, aclCommands), prefix); len(failed) > 0 {
			t.Errorf("features failed as the least-privilege user (a command missing from aclCommands and docs/production.md?):\n%s",
				joinFailures(failed))
		}
	})
	t.Run("one command missing", func(t *testing.T) {
		prefix := "aclmiss:"
		less := slices.DeleteFunc(slices.Clone(aclCommands), func(c string) bool { return c == "hset" })
		rdb := startACL(t, prefix, password, less)
		// The user really lacks HSET: sent on its own, the server refuses
		// it, and the library classifies the refusal as a permission
		// error. Every server tested answers NOPERM here.
		if err := rdb.HSet(context.Background(), prefix+"probe", "f", "v").Err(); ErrorReason(err) != ReasonNoPerm {
			t.Fatalf("HSET as a user without it = %v (reason %q), want reason %q", err, ErrorReason(err), ReasonNoPerm)
		}
		failed := runFeatures(t, rdb, prefix)
		// Only the features whose script calls HSET fail: Overrides.Set
		// with the server's refusal (an error reply, not a timeout, a lost
		// connection or a degraded decision), and token leases, whose
		// calls are decisions, under the failure policy. The reply's wording is the
		// server's own and differs between Redis and Valkey versions (an
		// ACL refusal inside a script is an ERR, not NOPERM, on Redis 7.0
		// and Valkey 8); the library classes each as a permission error.
		if len(failed) == 0 {
			t.Fatal("without HSET, every feature worked: the test cannot notice a missing command")
		}
		for _, f := range failed {
			var rerr redis.Error
			if f.what == "Allow (token leases)" || strings.HasPrefix(f.what, "logged") && strings.Contains(f.what, "op=lease ") {
				// A lease call the server refuses is the key's own fault:
				// logged with its reason, and decided under the failure
				// policy, as any decision whose call fails.
				if f.what != "Allow (token leases)" && !strings.Contains(f.what, "reason=noperm") {
					t.Errorf("without HSET, %v; want the lease call's refusal logged with reason=noperm", f)
				}
				continue
			}
			if !strings.HasPrefix(f.what, "Overrides.Set") || !errors.As(f.err, &rerr) {
				t.Errorf("without HSET, %v; want only Overrides.Set to fail, with an error reply", f)
			} else if r := ErrorReason(f.err); r != ReasonNoPerm {
				t.Errorf("without HSET, %v is classed %q, want %q", f, r, ReasonNoPerm)
			}
		}
	})
}

// TestScriptCommandsDocumented holds every command a script calls to the
// ACL table of docs/production.md (one home for what each feature needs)
// and to aclCommands, the user TestLeastPrivilegeACL runs as: a script
// that calls a new command fails here until both name it. A command called
// under pcall, whose refusal the script handles, must be marked optional
// in the table and may be missing from aclCommands.
func TestScriptCommandsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/production.md")
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(doc, []byte("## Redis permissions (ACL)"))
	if start < 0 {
		t.Fatal("docs/production.md has no section \"Redis permissions (ACL)\"")
	}
	section := doc[start:]
	if end := bytes.Index(section[3:], []byte("\n## ")); end >= 0 {
		section = section[:end+3]
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`([A-Z]+(?: [A-Z]+)?)`").FindAllSubmatch(section, -1) {
		documented[strings.ToLower(string(m[1]))] = true
	}
	optional := map[string]bool{}
	for _, line := range strings.Split(string(section), "\n") {
		if _, after, ok := strings.Cut(line, "optional:"); ok {
			for _, m := range regexp.MustCompile("`([A-Z]+(?: [A-Z]+)?)`").FindAllStringSubmatch(after, -1) {
				optional[strings.ToLower(m[1])] = true
			}
		}
	}
	granted := map[string]bool{}
	for _, c := range aclCommands {
		granted[strings.ReplaceAll(c, "|", " ")] = true
	}
	scripts, err := filepath.Glob("internal/redisstore/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	called := regexp.MustCompile(`\b(redis\.p?call|call)\(\s*'([A-Za-z]+)'(?:,\s*'([A-Za-z]+)')?`)
	seen := 0
	for _, name := range scripts {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range called.FindAllStringSubmatch(string(src), -1) {
			cmd := strings.ToLower(m[2])
			if cmd == "cluster" && m[3] != "" {
				cmd += " " + strings.ToLower(m[3])
			}
			seen++
			pcall := m[1] == "redis.pcall"
			switch {
			case !documented[cmd]:
				t.Errorf("%s calls %s, which docs/production.md's ACL table does not name", name, strings.ToUpper(cmd))
			case pcall && !optional[cmd] && !granted[cmd]:
				t.Errorf("%s calls %s under pcall: the table should mark it optional, or aclCommands grant it", name, strings.ToUpper(cmd))
			case !pcall && !granted[cmd]:
				t.Errorf("%s calls %s, which aclCommands (the least-privilege user) does not grant", name, strings.ToUpper(cmd))
			}
		}
	}
	t.Logf("%d calls in %d scripts checked against %d documented commands", seen, len(scripts), len(documented))
	if seen == 0 {
		t.Fatal("found no redis.call in the scripts: is the test reading them?")
	}
}
