// Command fairshare shows one upstream quota shared by ten tenants, with
// and without fair share: an upstream API allows this service 1,000
// requests a second (bursts of 100), and every request to it passes one
// middleware whose path is the upstream, then the tenant:
//
//	upstream   1,000 a second, bursts of 100     (shared: WithShare)
//	 └ tenant  5,000 a second
//
// For ten simulated seconds one tenant (the hog) offers 5,000 requests a
// second and nine others 100 each, 5,900 a second against 1,000. Without
// fair share whoever asks first takes the upstream's tokens, and the hog,
// asking fifty times as often, takes nearly all of them. With
// core.Share{Fair: true} each tenant is guaranteed its fair share when
// the upstream is contended: the nine small tenants ask less than theirs
// and get what they ask, and the hog gets the rest. The upstream admits
// as much either way.
//
// It runs on core.NewMemory with a simulated clock, so it takes a second
// or two whatever the machine; on Redis (core.New) the same decisions are
// made by one script call per request, fleet-wide (docs/fairshare.md).
//
//	go run ./fairshare
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// upstream is the quota the tenants share.
var upstream = core.PerSecond(1000).WithBurst(100)

// tenant offers a request every gap, from phase on.
type tenant struct{ gap, phase time.Duration }

// tenants are the hog and the nine small tenants, each small one a
// little out of step with the others.
var tenants = func() map[string]tenant {
	t := map[string]tenant{"hog": {gap: 200 * time.Microsecond}}
	for i := range 9 {
		t[fmt.Sprintf("small-%d", i+1)] = tenant{gap: 10 * time.Millisecond, phase: time.Duration(i) * 1090 * time.Microsecond}
	}
	return t
}()

// handler returns the service behind the middleware, sharing the upstream
// fairly when fair is set, on a memory limiter reading *now.
func handler(now *time.Time, fair bool) (http.Handler, error) {
	lim, err := core.NewMemory(core.WithClock(func() time.Time { return *now }))
	if err != nil {
		return nil, err
	}
	opts := []httplimit.Option{
		httplimit.WithPath("upstream", policy.PathLevel{Name: "tenant", Key: keyfunc.Header("X-Tenant"), Limits: []core.Limit{core.PerSecond(5000)}}),
	}
	if fair {
		opts = append(opts, httplimit.WithShare("upstream", core.Share{Fair: true}))
	}
	mw, err := httplimit.Build(lim, upstream, keyfunc.Static("payments-api"), opts...)
	if err != nil {
		return nil, err
	}
	return mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})), nil
}

// simulate offers the tenants' traffic for d and returns what each got.
func simulate(fair bool, d time.Duration) (map[string]int, error) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	h, err := handler(&now, fair)
	if err != nil {
		return nil, err
	}
	type call struct {
		at     time.Duration
		tenant string
	}
	var calls []call
	for name, tn := range tenants {
		for at := tn.phase; at < d; at += tn.gap {
			calls = append(calls, call{at, name})
		}
	}
	slices.SortFunc(calls, func(a, b call) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return compare(a.tenant, b.tenant)
	})
	start := now
	got := map[string]int{}
	for _, c := range calls {
		now = start.Add(c.at)
		req := httptest.NewRequest("GET", "/quote", nil)
		req.Header.Set("X-Tenant", c.tenant)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == http.StatusOK {
			got[c.tenant]++
		}
	}
	return got, nil
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// run prints both runs side by side.
func run(_ context.Context, out io.Writer) error {
	const d = 10 * time.Second
	plain, err := simulate(false, d)
	if err != nil {
		return err
	}
	fair, err := simulate(true, d)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(tenants))
	for name := range tenants {
		names = append(names, name)
	}
	slices.Sort(names)
	fmt.Fprintf(out, "upstream %s shared by 10 tenants for %s (it allows %d)\n\n", upstream, d, upstream.Burst+int(d.Seconds())*upstream.Rate)
	fmt.Fprintf(out, "%-10s %8s %14s %14s\n", "tenant", "offered", "first come", "fair share")
	var sumPlain, sumFair int
	for _, name := range names {
		offered := int(d / tenants[name].gap)
		fmt.Fprintf(out, "%-10s %8d %8d %4.0f%% %8d %4.0f%%\n", name, offered,
			plain[name], 100*float64(plain[name])/float64(offered), fair[name], 100*float64(fair[name])/float64(offered))
		sumPlain += plain[name]
		sumFair += fair[name]
	}
	fmt.Fprintf(out, "%-10s %8s %14d %14d\n", "total", "", sumPlain, sumFair)
	return nil
}
