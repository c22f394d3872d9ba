// Command sluice sets, lists and removes the run-time overrides of a
// sluice limiter (see overrides.Set): per-key limits, and allow and deny
// entries, shared by every replica through Redis. A change applies on
// every replica within its refresh interval (1s by default) plus one round
// trip. It also shows what a key has left, resets a key's buckets, and
// checks that Redis is ready for the limiter.
//
// Usage:
//
//	sluice [flags] override set <set> <key> <override>
//	sluice [flags] override list <set>
//	sluice [flags] override rm <set> <key>
//	sluice [flags] allow <set> <key-or-cidr>
//	sluice [flags] deny <set> <key-or-cidr>
//	sluice [flags] usage <key> <limits> [<scope>]
//	sluice [flags] usage <limits> [<scope>] -- <key>...
//	sluice [flags] usage cap <max> [<name>] -- <key>...
//	sluice [flags] reset <key> <limits> [<scope>]
//	sluice [flags] top <limit> [<k>]
//	sluice [flags] path usage <scope> <name>=<limits>... -- <key>...
//	sluice [flags] path reset <scope> <name>=<limits>... -- <key>...
//	sluice [flags] ready
//	sluice simulate -limits FILE -log FILE [-top N] [-deny-at-most PERCENT]
//	sluice convert -key FIELD [-prefix TEXT] [-in FILE] [-out FILE]
//
// An override is "allow", "deny", or limits as core.ParseLimit reads them,
// several separated by ";": "600/1m burst 600", "10/s; 1000/h". A key is
// the middleware's key exactly ("tenant:acme", "ip:203.0.113.7"); an allow
// or deny entry may instead be an IP address or CIDR prefix
// ("203.0.113.0/24"), matched against the client address. allow and deny
// are shorthand for override set with "allow" or "deny". Remove either with
// override rm.
//
// # Usage, reset and readiness
//
// usage prints what a request of cost 1 on key would get now (see
// core.Limiter.Peek), without taking anything: the tokens left of the
// limit that decides, when its bucket is full again, and any penalty lock.
// reset empties the key's record, so that its next request finds full
// buckets and no lock (see core.Limiter.Reset; a replica that was denying
// the key from its deny cache asks Redis again within a second). A bucket is named by the
// key, the limits and the middleware's scope, so give the limits the
// middleware has (its limit, then those of WithLimits, separated by ";")
// and its scope: none for a middleware without an option, the name given
// to WithScope, or "route:GET /orders/{id}" for WithPerRoute(true) or
// WithRoute, as keyfunc.Route writes the route. For example:
//
//	sluice usage tenant:acme 600/m
//	sluice reset ip:203.0.113.7 "5/15m burst 2 name login" route:POST /login
//
// With "--", usage reads several keys at once, one line each, in one
// round trip per Redis node and writing nothing (see core.Rule.PeekMany):
// the limits and scope come first, then "--" and the keys. "usage cap"
// shows how many slots of a concurrency cap (see core.ConcurrencyLimit:
// its Max, and its Name if it has one) each key holds now, across the
// fleet (see core.Concurrency.InFlight):
//
//	sluice usage 600/m -- tenant:acme tenant:globex tenant:initech
//	sluice usage cap 5 uploads -- tenant:acme
//
// # Top talkers
//
// top prints a limit's heaviest keys over the fleet, as services with
// core.WithTopTalkers flush them to Redis (see core.Limiter.Top): the k
// most denied (default 10) and the k of largest admitted cost, with the
// totals and the error bound of every count. Keys show as "#" and the hex
// of their hash unless the services keep names (core.TopTalkers.Names).
// -window must be the services' TopTalkers.Window (default 1m).
//
//	sluice top search
//
// path usage prints, for a path of keys decided by a core.PathRule (root
// first, one key per level), what each level has left (see
// core.PathRule.Peek); path reset empties the levels the keys name and no
// others (see core.PathRule.Reset). Give the rule's scope and its levels,
// each as name=limits, root first, then "--" and the keys:
//
//	sluice path usage api "org=1000/h" "user=60/m" -- acme alice
//	sluice path reset api "org=1000/h" "user=60/m" -- acme
//
// ready checks the limiter's Redis as a readiness probe does (see
// core.Limiter.Ready): it prints "ready" and exits 0, or prints the cause
// and exits 1.
//
// # Replay
//
// simulate replays a recorded log through sluice's own arithmetic, under
// each rule of a limits file, without Redis (see package core/replay and
// docs/replay.md):
//
//	sluice simulate -limits limits.txt -log requests.jsonl -deny-at-most 1
//
// It prints, per rule and per limit (per level of a path), the requests
// admitted and denied, the first denial, the -top most denied keys, and
// the smallest version of each limit that alone would have denied at most
// -deny-at-most percent of them. A bad line of the log is reported with
// its number and skipped. convert turns an access log in the combined
// format into the log simulate reads, the key taken from one field:
//
//	sluice convert -key ip -in access.log -out requests.jsonl
//
// # Reaching Redis
//
// -redis names the services' Redis: host:port, or a URL,
// redis://[user[:password]@]host[:port][/db], or rediss://... for TLS.
// It defaults to $REDIS_ADDR, else 127.0.0.1:6379. Several comma-separated
// addresses name Redis Cluster nodes with -cluster (one is enough), or
// Sentinels with -sentinel-master <name>. -user names an ACL user, and
// -db a database.
//
// A password is best read from an environment variable (-password-env
// VAR) or a file (-password-file path, its first line), not written on the
// command line, where other users of the host can see it; the Sentinels'
// own password, if they have one, from -sentinel-password-env VAR. The
// command never prints a password: a message that would show one shows
// xxxxx instead.
//
// TLS is on with rediss://, -tls, or any other -tls flag: -tls-ca names the
// PEM file of the authorities to trust (default: the system's), -tls-cert
// and -tls-key a client certificate, -tls-server-name the name the
// server's certificate must carry (default: the host of -redis), and
// -tls-insecure-skip-verify turns the check of the server's certificate
// off, for tests.
//
// The Redis user needs, on keys <prefix>*, the commands EVALSHA, EVAL,
// GET, HEXISTS, HLEN, HSET, HDEL, HGETALL and INCR (see
// docs/production.md).
//
// -prefix must be the services' core.WithPrefix (default "sluice:"). The
// exit code is 0 on success, 1 when Redis fails (unreachable, refused the
// credentials, timed out), and 2 for a usage error, such as a bad flag or
// an entry the middleware would never match.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/overrides"
)

func main() {
	// go-redis logs dial failures to standard error on its own; the
	// command reports each failure once, in its own words.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// quietLogger discards go-redis's own log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

const usage = `usage:
  sluice [flags] override set <set> <key> <override>
  sluice [flags] override list <set>
  sluice [flags] override rm <set> <key>
  sluice [flags] allow <set> <key-or-cidr>
  sluice [flags] deny <set> <key-or-cidr>
  sluice [flags] usage <key> <limits> [<scope>]
  sluice [flags] usage <limits> [<scope>] -- <key>...
  sluice [flags] usage cap <max> [<name>] -- <key>...
  sluice [flags] reset <key> <limits> [<scope>]
  sluice [flags] top <limit> [<k>]
  sluice [flags] path usage <scope> <name>=<limits>... -- <key>...
  sluice [flags] path reset <scope> <name>=<limits>... -- <key>...
  sluice [flags] ready
  sluice simulate -limits FILE -log FILE [-top N] [-deny-at-most PERCENT]
  sluice convert -key FIELD [-prefix TEXT] [-in FILE] [-out FILE]

<override> is allow, deny, or limits such as "600/1m burst 600" or "10/s; 1000/h".
<limits> are the middleware's limits, such as "600/m" or "10/s; 1000/h"; <scope> its
WithScope name, or "route:GET /path" when it counts per route; none without one.

flags:
`

// entryError is an allow or deny entry that no request could match (exit
// code 2, without the usage text).
type entryError struct{ error }

// usageError is an error of the command line (exit code 2).
type usageError string

func (e usageError) Error() string { return string(e) }

// run runs the command with args and returns its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runEnv(ctx, args, os.Getenv, stdout, stderr)
}

// runEnv is run with getenv reading the environment.
func runEnv(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	// Every line goes out through a redactor, which knows the passwords
	// as soon as they are read: no message prints one, whatever it quotes.
	var secrets []string
	stdout, stderr = redactor{stdout, &secrets}, redactor{stderr, &secrets}
	if offline(args) {
		return runOffline(args, stdout, stderr)
	}
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	secrets = append(secrets, urlSecrets(addr)...)
	var conn connFlags
	conn.define(fs, addr)
	prefix := fs.String("prefix", "sluice:", "the services' key prefix (core.WithPrefix)")
	timeout := fs.Duration("timeout", 5*time.Second, "time allowed for the command")
	window := fs.Duration("window", time.Minute, "for top: the services' top-talkers window (core.TopTalkers.Window)")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	opts, found, err := conn.options(getenv)
	secrets = append(secrets, found...)
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 2
	}
	cmd, err := parseCommand(fs.Args())
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		if !errors.As(err, new(entryError)) {
			fs.Usage()
		}
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rdb := redis.NewUniversalClient(opts)
	defer rdb.Close()
	limOpts := []core.Option{core.WithPrefix(*prefix), core.WithTimeout(*timeout), core.WithLogger(slog.New(slog.DiscardHandler))}
	if cmd.op == "top" {
		limOpts = append(limOpts, core.WithTopTalkers(core.TopTalkers{Window: *window, Flush: min(*window, 10*time.Second)}))
	}
	lim, err := core.New(rdb, limOpts...)
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 2
	}
	defer lim.Close()
	var ov *overrides.Set
	if cmd.set != "" {
		// The poller is not needed: refresh rarely, and Close at once.
		if ov, err = overrides.New(lim, cmd.set, overrides.WithRefresh(time.Hour)); err != nil {
			fmt.Fprintf(stderr, "sluice: %v\n", err)
			return 2
		}
		defer ov.Close()
	}
	if err := cmd.exec(ctx, lim, ov, stdout); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			err = fmt.Errorf("no answer from Redis within -timeout %v: %w", *timeout, err)
		}
		if conn.master != "" && strings.Contains(err.Error(), "all sentinels") {
			// go-redis says so also when they answer but know no such master.
			err = fmt.Errorf("%w (are these Sentinels, and do they monitor a master named %q?)", err, conn.master)
		}
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		var uerr usageError
		if errors.As(err, &uerr) || errors.Is(err, core.ErrInvalidLimit) {
			return 2
		}
		return 1
	}
	return 0
}

// command is one parsed command line.
type command struct {
	op       string // "set", "list", "rm", "usage", "usage many", "usage cap", "reset", "top" or "ready"
	set, key string
	override overrides.Override // for usage and reset, the limits
	scope    string             // for usage and reset, and a path's
	levels   []core.Level       // for path usage and reset
	path     []string           // for path usage and reset: the keys, root first
	keys     []string           // for usage of several keys, or of a cap
	capLimit core.ConcurrencyLimit
	k        int // for top: how many keys of each kind
}

func parseCommand(args []string) (command, error) {
	want := func(n int, form string) error {
		if len(args) != n {
			return fmt.Errorf("%s takes %s, got %d arguments", strings.Join(args[:min(len(args), 2)], " "), form, len(args)-min(len(args), 2))
		}
		return nil
	}
	if len(args) == 0 {
		return command{}, errors.New("no command")
	}
	switch args[0] {
	case "ready":
		if len(args) != 1 {
			return command{}, fmt.Errorf("ready takes no arguments, got %d", len(args)-1)
		}
		return command{op: "ready"}, nil
	case "top":
		return parseTop(args)
	case "usage", "reset":
		if args[0] == "usage" && slices.Contains(args, "--") {
			return parseUsageMany(args)
		}
		if len(args) != 3 && len(args) != 4 {
			return command{}, fmt.Errorf("%s takes <key> <limits> [<scope>], got %d arguments", args[0], len(args)-1)
		}
		if args[1] == "" {
			return command{}, fmt.Errorf("%s: empty key", args[0])
		}
		o, err := overrides.Parse(args[2])
		if err != nil {
			return command{}, err
		}
		if len(o.Limits) == 0 {
			return command{}, fmt.Errorf("%s: %q is not limits, such as \"600/m\" or \"10/s; 1000/h\"", args[0], args[2])
		}
		c := command{op: args[0], key: args[1], override: o}
		if len(args) == 4 {
			if args[3] == "" {
				return command{}, fmt.Errorf("%s: empty scope; leave it out for a middleware without one", args[0])
			}
			c.scope = args[3]
		}
		return c, nil
	case "path":
		return parsePath(args)
	case "allow", "deny":
		if len(args) != 3 {
			return command{}, fmt.Errorf("%s takes <set> <key-or-cidr>, got %d arguments", args[0], len(args)-1)
		}
		o := overrides.Override{Allow: args[0] == "allow", Deny: args[0] == "deny"}
		return command{op: "set", set: args[1], key: args[2], override: o}.checked()
	case "override":
	default:
		return command{}, fmt.Errorf("unknown command %q", args[0])
	}
	if len(args) < 2 {
		return command{}, errors.New("override needs set, list or rm")
	}
	switch args[1] {
	case "set":
		if err := want(5, "<set> <key> <override>"); err != nil {
			return command{}, err
		}
		o, err := overrides.Parse(args[4])
		if err != nil {
			return command{}, err
		}
		return command{op: "set", set: args[2], key: args[3], override: o}.checked()
	case "list", "ls":
		if err := want(3, "<set>"); err != nil {
			return command{}, err
		}
		return command{op: "list", set: args[2]}, nil
	case "rm", "remove":
		if err := want(4, "<set> <key>"); err != nil {
			return command{}, err
		}
		return command{op: "rm", set: args[2], key: args[3]}, nil
	}
	return command{}, fmt.Errorf("unknown override command %q; want set, list or rm", args[1])
}

// checked returns c, or the reason why the middleware would never match
// its allow or deny entry: the check of [keyfunc.ParseListEntry], which
// WithAllow, WithDeny and overrides.Set.Set apply too.
func (c command) checked() (command, error) {
	if c.override.Allow || c.override.Deny {
		if _, _, err := keyfunc.ParseListEntry(c.key); err != nil {
			return command{}, entryError{err}
		}
	}
	return c, nil
}

func (c command) exec(ctx context.Context, lim *core.Limiter, ov *overrides.Set, out io.Writer) error {
	switch c.op {
	case "ready":
		if err := lim.Ready(ctx); err != nil {
			return err
		}
		fmt.Fprintln(out, "ready")
	case "path usage", "path reset":
		return c.execPath(ctx, lim, out)
	case "usage", "reset":
		rule, err := lim.PrepareScoped(c.scope, c.override.Limits...)
		if err != nil {
			return err
		}
		if c.op == "reset" {
			if err := rule.Reset(ctx, c.key); err != nil {
				return err
			}
			fmt.Fprintf(out, "%s reset under %s%s\n", quote(c.key), c.override, scopeText(c.scope))
			return nil
		}
		res, err := rule.Peek(ctx, c.key)
		if err != nil {
			return err
		}
		printUsage(out, c.key, c.override, c.scope, res)
	case "usage many", "usage cap":
		return c.execUsageMany(ctx, lim, out)
	case "top":
		return c.execTop(ctx, lim, out)
	case "set":
		if err := ov.Set(ctx, c.key, c.override); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s %s = %s (version %d)\n", c.set, quote(c.key), c.override, ov.Version())
	case "rm":
		m, err := ov.List(ctx)
		if err != nil {
			return err
		}
		if _, ok := m[c.key]; !ok {
			return usageError(fmt.Sprintf("%s has no entry for %s", c.set, quote(c.key)))
		}
		if err := ov.Remove(ctx, c.key); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s %s removed (version %d)\n", c.set, quote(c.key), ov.Version())
	case "list":
		m, err := ov.List(ctx)
		if err != nil {
			return err
		}
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range m {
				if !yield(k) {
					return
				}
			}
		})
		for _, k := range keys {
			fmt.Fprintf(out, "%s\t%s\n", quote(k), m[k])
		}
		fmt.Fprintf(out, "# %s: %d entries, version %d\n", c.set, len(m), ov.Version())
	}
	return nil
}

// ceilSecond rounds d up to whole seconds, as Retry-After does.
func ceilSecond(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

// scopeText names a scope after the limits, or nothing for none.
func scopeText(scope string) string {
	if scope == "" {
		return ""
	}
	return " in scope " + quote(scope)
}

// quote returns k as is when it prints plainly, else Go-quoted.
func quote(k string) string {
	if k == "" || strings.ContainsAny(k, " #") || strconv.Quote(k) != `"`+k+`"` {
		return strconv.Quote(k)
	}
	return k
}
