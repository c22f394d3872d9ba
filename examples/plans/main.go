// Command plans changes a tenant's plan at run time, across three replicas
// of a service, through sluice's override set (overrides.Set):
//
//   - three replicas (three limiters, each with its own Redis client, each
//     behind its own HTTP server) limit tenants to 5 requests a minute;
//   - tenant acme uses up its 5, and is denied;
//   - an operator upgrades acme to 50 a minute, as `sluice override set`
//     would, and the program measures when each replica applies it: within
//     the override set's refresh interval plus one round trip;
//   - the operator puts tenant mallory on the deny list: the replica the
//     operator used refuses it at once (403), the others within the same
//     delay.
//
// It uses an embedded miniredis unless REDIS_ADDR names a real Redis, sends
// requests to loopback only, and stops by itself in a few seconds.
//
//	go run ./plans [-refresh 200ms]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoredis"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/overrides"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// replica is one instance of the service.
type replica struct {
	name string
	lim  *core.Limiter
	ov   *overrides.Set
	srv  *httptest.Server
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("plans", flag.ContinueOnError)
	refresh := fs.Duration("refresh", 200*time.Millisecond, "how often each replica checks the override set")
	if err := fs.Parse(args); err != nil {
		return err
	}
	redisSrv, err := demoredis.Start(out)
	if err != nil {
		return err
	}
	defer redisSrv.Close()
	quiet := slog.New(slog.DiscardHandler)
	// A prefix of this run's own, so that a shared Redis (REDIS_ADDR) starts
	// from nothing; the set is deleted at the end (buckets expire by
	// themselves).
	prefix := fmt.Sprintf("sluice-plans-demo:%d:", time.Now().UnixNano())

	// Three replicas, as three processes would run them.
	var replicas []*replica
	defer func() {
		for _, r := range replicas {
			r.srv.Close()
			r.ov.Close()
		}
	}()
	for i := range 3 {
		rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer rdb.Close()
		lim, err := core.New(rdb, core.WithPrefix(prefix), core.WithTimeout(time.Second), core.WithLogger(quiet), core.WithFallbackReplicas(3))
		if err != nil {
			return err
		}
		// Ready, as a readiness probe calls it: the scripts are loaded and
		// connections open before the first request spends its budget.
		if err := lim.Ready(ctx); err != nil {
			return err
		}
		ov, err := overrides.New(lim, "plans", overrides.WithRefresh(*refresh))
		if err != nil {
			return err
		}
		if err := ov.Sync(ctx); err != nil {
			return err
		}
		limit := httplimit.New(lim, core.PerMinute(5).WithName("free"), keyfunc.Tenant("X-Tenant"),
			httplimit.WithScope("api"), // the replicas share buckets
			httplimit.WithOverrides(ov),
		)
		ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		replicas = append(replicas, &replica{name: fmt.Sprint("replica ", i+1), lim: lim, ov: ov, srv: httptest.NewServer(limit(ok))})
	}
	fmt.Fprintf(out, "3 replicas limit each tenant to 5/m; each checks the override set every %s\n\n", *refresh)

	// acme uses up its plan, spread over the replicas.
	fmt.Fprint(out, "acme, 7 requests over the replicas:")
	for i := range 7 {
		code, _, err := get(replicas[i%3], "acme")
		if err != nil {
			return err
		}
		fmt.Fprintf(out, " %d", code)
	}
	fmt.Fprintln(out)

	// The operator's side: another client, as the sluice command is.
	admin := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer admin.Close()
	adminLim, err := core.New(admin, core.WithPrefix(prefix), core.WithTimeout(time.Second), core.WithLogger(quiet))
	if err != nil {
		return err
	}
	// The set's keys, as overrides.Set documents them.
	defer admin.Del(context.WithoutCancel(ctx), prefix+"{ovr:plans}", prefix+"{ovr:plans}v")
	ops, err := overrides.New(adminLim, "plans", overrides.WithRefresh(time.Hour))
	if err != nil {
		return err
	}
	defer ops.Close()
	pro, err := overrides.Parse("50/m name pro")
	if err != nil {
		return err
	}
	start := time.Now()
	if err := ops.Set(ctx, "tenant:acme", pro); err != nil {
		return err
	}
	fmt.Fprintf(out, "\noperator: sluice override set plans tenant:acme %q (version %d)\n", pro, ops.Version())
	for _, r := range replicas {
		took, err := until(start, func() (bool, error) {
			_, h, err := get(r, "acme")
			return h.Get("X-RateLimit-Limit") == "50", err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		fmt.Fprintf(out, "%s answers acme under %s after %s\n", r.name, h50(r), took.Round(10*time.Millisecond))
	}
	fmt.Fprintf(out, "(stated delay: the refresh interval, %s, plus one round trip)\n", *refresh)

	fmt.Fprint(out, "\nacme, 6 more requests:")
	for i := range 6 {
		code, _, err := get(replicas[i%3], "acme")
		if err != nil {
			return err
		}
		fmt.Fprintf(out, " %d", code)
	}
	fmt.Fprintln(out)

	// A deny-list entry, set through replica 1's own override set (an
	// admin endpoint of the service, say).
	code, _, err := get(replicas[0], "mallory")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nmallory: %d\n", code)
	start = time.Now()
	if err := replicas[0].ov.Set(ctx, "tenant:mallory", overrides.Override{Deny: true}); err != nil {
		return err
	}
	fmt.Fprintln(out, "operator, on replica 1: deny tenant:mallory")
	for _, r := range replicas {
		tries := 0
		took, err := until(start, func() (bool, error) {
			tries++
			code, _, err := get(r, "mallory")
			return code == http.StatusForbidden, err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		fmt.Fprintf(out, "%s refuses mallory (403) after %s, at request %d\n", r.name, took.Round(10*time.Millisecond), tries)
	}
	return nil
}

// h50 describes the limit a replica now applies to acme.
func h50(r *replica) string {
	o, _ := r.ov.Lookup("tenant:acme")
	return o.String()
}

// get sends GET / as tenant to r.
func get(r *replica, tenant string) (int, http.Header, error) {
	req, err := http.NewRequest("GET", r.srv.URL, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("X-Tenant", tenant)
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		return 0, nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, nil
}

// until polls done every 10ms until it reports true, and returns the time
// since start; it gives up after 10 seconds.
func until(start time.Time, done func() (bool, error)) (time.Duration, error) {
	for {
		ok, err := done()
		if err != nil {
			return 0, err
		}
		if ok {
			return time.Since(start), nil
		}
		if time.Since(start) > 10*time.Second {
			return 0, fmt.Errorf("not applied within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
