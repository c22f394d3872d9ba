// Command orgtree limits a multi-tenant API as a tree, every level decided
// at once, in one Redis call per request:
//
//	org    acme (Asia/Tokyo)           40 a calendar month, Tokyo time   (plan function)
//	       globex (America/New_York)    5 a calendar month, New York time
//	 └ team    20 a second
//	    └ user   60 a minute, bursts of 3                                 (overrides: plan changes)
//	       └ API key  30 a minute, 2 requests in flight
//
// A request is admitted only if every level admits it, and then every
// level is charged; a request any level denies charges none (a user who
// hits its burst does not eat the organisation's monthly quota). The
// answer's RateLimit fields and problem body name the level that decided.
//
// The program replays a short story against an in-process server and
// prints what each request got:
//
//   - alice (acme, eng) sends 4 requests at once: the 4th is denied by
//     the user level;
//   - an operator upgrades alice to 600 a minute with bursts of 20, at run
//     time, through the override set (as `sluice override set` would);
//     her next requests pass;
//   - one API key holds 2 slow requests: a third in flight is refused;
//   - globex has 5 a month: carol's 4th request is denied by her burst and
//     charges globex nothing, so dave still gets 2 before the organisation
//     level denies, until the 1st of next month, midnight in New York.
//
// It uses an embedded miniredis unless REDIS_ADDR names a real Redis, and
// stops by itself.
//
//	go run ./orgtree
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoredis"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// identity is what the server knows of an API key. A client sends only
// its key; the tree above it is the server's own, so no client can pick
// its buckets.
type identity struct{ org, team, user string }

var apiKeys = map[string]identity{
	"ak_alice_1": {"acme", "eng", "alice"},
	"ak_alice_2": {"acme", "eng", "alice"},
	"ak_bob_1":   {"acme", "eng", "bob"},
	"ak_carol_1": {"globex", "ops", "carol"},
	"ak_dave_1":  {"globex", "ops", "dave"},
}

// orgPlans are the organisations' monthly quotas, each in its own zone.
var orgPlans = map[string]core.Limit{
	"acme":   core.PerCalendarMonth(40, "Asia/Tokyo").WithName("monthly"),
	"globex": core.PerCalendarMonth(5, "America/New_York").WithName("monthly"),
}

// level returns a key function for one level of the caller's identity.
func level(prefix string, part func(identity) string) keyfunc.Func {
	return func(r keyfunc.Request) (string, error) {
		id, ok := apiKeys[r.Header("X-Api-Key")]
		if !ok {
			return "", fmt.Errorf("%w: unknown API key", keyfunc.ErrNoKey)
		}
		return prefix + part(id), nil
	}
}

func run(ctx context.Context, out io.Writer) error {
	redisSrv, err := demoredis.Start(out)
	if err != nil {
		return err
	}
	defer redisSrv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	// A second's budget, not the default 50 ms: this demo prints every
	// level's exact count, and an embedded Redis shares this process's
	// CPU. On a busy machine a decision could outlive 50 ms; one whose
	// answer a pause of this process delayed is asked once more, which
	// can charge its key twice (erring toward denying), and the printed
	// counts would no longer be the tree's.
	lim, err := core.New(rdb, core.WithLogger(slog.New(slog.DiscardHandler)), core.WithFallbackReplicas(1), core.WithTimeout(time.Second))
	if err != nil {
		return err
	}
	defer lim.Close()
	// Ready, as a readiness probe calls it: the scripts are loaded and
	// connections open before the first request spends its budget.
	if err := lim.Ready(ctx); err != nil {
		return err
	}
	plans, err := overrides.New(lim, "plans", overrides.WithRefresh(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer plans.Close()

	limit := httplimit.New(lim, core.PerCalendarMonth(1, "UTC"), level("org:", func(id identity) string { return id.org }),
		// The organisation's plan: its quota, in its own time zone.
		httplimit.WithLimitFunc(func(r *http.Request) (core.Limit, error) {
			id := apiKeys[r.Header.Get("X-Api-Key")]
			if l, ok := orgPlans[id.org]; ok {
				return l, nil
			}
			return core.Limit{}, fmt.Errorf("%w: no plan", keyfunc.ErrNoKey)
		}),
		httplimit.WithPath("org",
			policy.PathLevel{Name: "team", Key: level("team:", func(id identity) string { return id.team }),
				Limits: []core.Limit{core.PerSecond(20)}},
			policy.PathLevel{Name: "user", Key: level("user:", func(id identity) string { return id.user }),
				Limits: []core.Limit{core.PerMinute(60).WithBurst(3).WithName("burst")}},
			policy.PathLevel{Name: "key", Key: keyfunc.Header("X-Api-Key"),
				Limits: []core.Limit{core.PerMinute(30)}},
		),
		httplimit.WithConcurrency(core.ConcurrencyLimit{Name: "in-flight", Max: 2}),
		httplimit.WithOverrides(plans),
		httplimit.WithScope("api"), // one budget across the API's routes
		httplimit.WithHeaders(policy.HeadersIETF),
		httplimit.WithProblemJSON(true))

	slow, started := make(chan struct{}), make(chan struct{}, 2)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /reports", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /export", func(w http.ResponseWriter, _ *http.Request) {
		started <- struct{}{}
		<-slow // a long export, held until the story lets it go
		fmt.Fprintln(w, "ok")
	})
	srv := httptest.NewServer(limit(mux))
	defer srv.Close()

	fmt.Fprint(out, tree)
	get := func(out io.Writer, who, key, path string) (*http.Response, string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Fprintf(out, "%s: %v\n", who, err)
			return nil, ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(out, "%-28s %d  RateLimit: %s", who, resp.StatusCode, resp.Header.Get("RateLimit"))
		if resp.StatusCode == http.StatusTooManyRequests {
			var pd struct {
				Violated []string `json:"violated-policies"`
			}
			_ = json.Unmarshal(body, &pd)
			fmt.Fprintf(out, "  Retry-After: %ss  violated-policies: %q", resp.Header.Get("Retry-After"), pd.Violated)
		}
		fmt.Fprintln(out)
		return resp, string(body)
	}

	fmt.Fprintln(out, "\n1. alice sends 4 requests at once (her burst is 3): the user level denies the 4th")
	for i := range 4 {
		get(out, fmt.Sprintf("alice #%d", i+1), "ak_alice_1", "/reports")
	}

	fmt.Fprintln(out, "\n2. alice's plan changes at run time: 600 a minute, bursts of 20")
	o, err := overrides.Parse("600/m burst 20")
	if err != nil {
		return err
	}
	if err := plans.Set(ctx, "user:alice", o); err != nil {
		return err
	}
	for i := range 2 {
		get(out, fmt.Sprintf("alice #%d", 5+i), "ak_alice_1", "/reports")
	}

	fmt.Fprintln(out, "\n3. alice's second API key holds 2 slow exports: a third in flight is refused")
	// Each slow export writes its line to a buffer of its own, printed in
	// order once both have finished.
	var wg sync.WaitGroup
	var exports [2]bytes.Buffer
	for i := range exports {
		wg.Add(1)
		go func() {
			defer wg.Done()
			get(&exports[i], fmt.Sprintf("export #%d (once finished)", i+1), "ak_alice_2", "/export")
		}()
	}
	for range 2 {
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			return errors.New("the slow exports never started")
		}
	}
	get(out, "export #3", "ak_alice_2", "/export")
	close(slow)
	wg.Wait()
	for i := range exports {
		_, _ = exports[i].WriteTo(out)
	}

	fmt.Fprintln(out, "\n4. globex has 5 a month: carol's 4th is denied by her burst and charges globex nothing,")
	fmt.Fprintln(out, "   so dave still gets 2 before the organisation level denies")
	for i := range 4 {
		get(out, fmt.Sprintf("carol #%d", i+1), "ak_carol_1", "/reports")
	}
	for i := range 3 {
		get(out, fmt.Sprintf("dave #%d", i+1), "ak_dave_1", "/reports")
	}
	ny, _ := time.LoadLocation("America/New_York")
	_, end := orgPlans["globex"].Window(time.Now())
	fmt.Fprintf(out, "   globex's quota is full again at %s\n", end.In(ny).Format("2006-01-02 15:04 MST"))
	return nil
}

const tree = `The tree, every level decided at once:

  org    acme   40 a calendar month (Asia/Tokyo)
         globex  5 a calendar month (America/New_York)
   └ team    20 a second
      └ user   60 a minute, bursts of 3
         └ API key  30 a minute, 2 requests in flight
`
