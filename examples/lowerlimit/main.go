// Command lowerlimit walks through lowering a per-tenant limit without
// fear, in four steps on the same traffic: shadow the new limit beside the
// one enforced, replay the recorded traffic through candidates, enforce
// the new limit on a canary share of tenants, then on every tenant.
//
// The traffic is an hour of requests from 50 tenants, from a fixed seed:
// most send a request every few seconds, acme three a second, wonka
// bursts of 60 in a few seconds every ten minutes. (A canary picks
// tenants by a keyed hash of the key: wonka is outside a 10% canary and
// inside a 50% one, acme outside both, which is why they are named so.)
// Each step decides the traffic on a limiter in memory whose clock is the
// traffic's (core.NewMemory with core.WithClock), through the net/http
// middleware a service runs, so an hour takes a second or two and the
// output is the same on every run. On Redis the steps are the same, in
// real time.
//
//	go run ./examples/lowerlimit
package main

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/replay"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

var (
	// live is the limit enforced today; proposed the one to ship.
	live     = core.PerMinute(600).WithName("tenant")
	proposed = core.PerMinute(120).WithBurst(30).WithName("tenant")
	// start is when the recorded hour begins.
	start = time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
)

// The candidates the replay decides, in the limits file's format (see
// docs/replay.md).
const limitsFile = `current    key  600/m
proposed   key  120/m burst 30
gentler    key  240/m burst 120
`

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// request is one request of the traffic: when, and from which tenant.
type request struct {
	at     time.Time
	tenant string
}

// traffic returns an hour of requests from 50 tenants, in time order,
// the same on every call.
func traffic() []request {
	r := rand.New(rand.NewPCG(7, 11))
	var out []request
	poisson := func(tenant string, perSecond float64) {
		for t := 0.0; ; {
			t += r.ExpFloat64() / perSecond
			if t >= 3600 {
				return
			}
			out = append(out, request{start.Add(time.Duration(t * float64(time.Second))), tenant})
		}
	}
	for i := range 47 {
		poisson(fmt.Sprintf("t%02d", i), 0.05+0.25*r.Float64())
	}
	poisson("acme", 3)
	poisson("initech", 1.5)
	for burst := range 6 { // wonka: 60 requests in 4 s every 10 min
		at := start.Add(time.Duration(burst)*10*time.Minute + 90*time.Second)
		for i := range 60 {
			out = append(out, request{at.Add(time.Duration(i) * 4 * time.Second / 60), "wonka"})
		}
	}
	slices.SortStableFunc(out, func(a, b request) int { return a.at.Compare(b.at) })
	return out
}

// clock is the traffic's clock, which the limiter reads.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }
func (c *clock) read() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// shadowCount counts, per tenant, the requests a shadow limit would have
// denied: an observer of the limiter (core.WithObserver).
type shadowCount struct {
	mu     sync.Mutex
	denied map[string]int
	total  int
	key    string // the key of the decision being observed (set by serve)
}

func (s *shadowCount) ObserveDecision(res core.Result, _ core.Source) {
	if res.Shadow.AnyDenied() {
		s.mu.Lock()
		s.denied[s.key]++
		s.total++
		s.mu.Unlock()
	}
}
func (s *shadowCount) ObserveStore(core.StoreCall)       {}
func (s *shadowCount) ObserveDegraded(core.StoreOutage)  {}
func (s *shadowCount) ObserveRecovered(core.StoreOutage) {}

// serve sends the traffic through the middleware mw, on a limiter whose
// clock is c, and returns the statuses per tenant.
func serve(reqs []request, c *clock, mw func(http.Handler) http.Handler, before func(tenant string)) map[string]map[int]int {
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	statuses := map[string]map[int]int{}
	for _, q := range reqs {
		c.set(q.at)
		if before != nil {
			before(q.tenant)
		}
		req := httptest.NewRequest(http.MethodGet, "/export", nil)
		req.Header.Set("X-Tenant", q.tenant)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if statuses[q.tenant] == nil {
			statuses[q.tenant] = map[int]int{}
		}
		statuses[q.tenant][rec.Code]++
	}
	return statuses
}

// newLimiter returns a limiter in memory on clock c, with an observer if
// obs is not nil.
func newLimiter(c *clock, obs core.Observer) (*core.Limiter, error) {
	opts := []core.Option{core.WithClock(c.read)}
	if obs != nil {
		opts = append(opts, core.WithObserver(obs))
	}
	return core.NewMemory(opts...)
}

func run(out io.Writer) error {
	reqs := traffic()
	fmt.Fprintf(out, "%d requests from 50 tenants over an hour; live limit %s, proposed %s\n\n", len(reqs), live, proposed)
	var log bytes.Buffer
	if err := shadowStep(out, reqs, &log); err != nil {
		return err
	}
	if err := replayStep(out, &log); err != nil {
		return err
	}
	for _, fraction := range []float64{0.1, 0.5, 1} {
		if err := canaryStep(out, reqs, fraction); err != nil {
			return err
		}
	}
	return nil
}

// shadowStep enforces the live limit with the proposed one as a shadow
// limit, records the traffic, and prints what the shadow would have
// denied.
func shadowStep(out io.Writer, reqs []request, log *bytes.Buffer) error {
	c := &clock{now: start}
	sc := &shadowCount{denied: map[string]int{}}
	lim, err := newLimiter(c, sc)
	if err != nil {
		return err
	}
	defer lim.Close()
	rec, err := replay.NewRecorder(log, 1) // every key: a small service
	if err != nil {
		return err
	}
	mw := httplimit.New(lim, live, keyfunc.Tenant("X-Tenant"),
		httplimit.WithShadowLimits(proposed),
		httplimit.WithRecord(rec))
	statuses := serve(reqs, c, mw, func(t string) { sc.key = "tenant:" + t })
	if err := rec.Close(); err != nil {
		return err
	}
	fmt.Fprintln(out, "1. Shadow: enforce the live limit, decide the proposed one beside it")
	fmt.Fprintf(out, "   live limit: %d of %d requests denied\n", count(statuses, http.StatusTooManyRequests), len(reqs))
	fmt.Fprintf(out, "   shadow %s: would deny %d (%.2f%%), of %s\n\n", proposed, sc.total,
		100*float64(sc.total)/float64(len(reqs)), top(sc.denied, 3))
	return nil
}

// replayStep replays the recording under the limits file's candidates.
func replayStep(out io.Writer, log *bytes.Buffer) error {
	events, err := replay.Read(log, func(b replay.BadLine) { fmt.Fprintln(out, "   bad line:", b) })
	if err != nil {
		return err
	}
	rules, err := replay.ParseRules(strings.NewReader(limitsFile))
	if err != nil {
		return err
	}
	o := replay.Options{Top: 2, DenyAtMost: 0.01}
	reports, err := replay.Simulate(events, rules, o)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "2. Replay the recording: sluice simulate -limits limits.txt -log requests.jsonl -top 2 -deny-at-most 1")
	var b strings.Builder
	replay.Print(&b, reports, o)
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		fmt.Fprintln(out, "   "+line)
	}
	fmt.Fprintln(out)
	return nil
}

// canaryStep enforces the proposed limit on fraction of tenants (all of
// them at 1) and prints whom it denied and what it would have denied of
// the others.
func canaryStep(out io.Writer, reqs []request, fraction float64) error {
	c := &clock{now: start}
	lim, err := newLimiter(c, nil)
	if err != nil {
		return err
	}
	defer lim.Close()
	would := map[string]int{}
	opts := []httplimit.Option{httplimit.WithEnforce(fraction)}
	if fraction < 1 { // a dry-run handler has nothing to hear of at 1
		opts = append(opts, httplimit.WithDryRunHandler(func(_ *http.Request, rep policy.DryRunReport) {
			if rep.Err == nil && !rep.Result.Allowed {
				would[rep.Key]++
			}
		}))
	}
	mw := httplimit.New(lim, proposed, keyfunc.Tenant("X-Tenant"), opts...)
	statuses := serve(reqs, c, mw, nil)
	denied := map[string]int{}
	for t, s := range statuses {
		if n := s[http.StatusTooManyRequests]; n > 0 {
			denied["tenant:"+t] = n
		}
	}
	if fraction < 1 {
		in, err := canaryTenants(lim, fraction, statuses)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "3. Canary: enforce the proposed limit on %.0f%% of tenants (WithEnforce(%g)): %d of 50 are in it\n", 100*fraction, fraction, in)
		fmt.Fprintf(out, "   denied (429): %d, of %s\n", count(statuses, http.StatusTooManyRequests), top(denied, 3))
		fmt.Fprintf(out, "   outside the canary, would deny: %d, of %s\n\n", sum(would), top(would, 3))
		return nil
	}
	fmt.Fprintln(out, "4. Enforce: the proposed limit on every tenant (WithEnforce removed)")
	fmt.Fprintf(out, "   denied (429): %d (%.2f%%), of %s\n", count(statuses, http.StatusTooManyRequests),
		100*float64(count(statuses, http.StatusTooManyRequests))/float64(len(reqs)), top(denied, 3))
	return nil
}

// canaryTenants returns how many of the traffic's tenants a canary at
// fraction enforces: core.Rule.Enforced, the same choice the middleware
// makes.
func canaryTenants(lim *core.Limiter, fraction float64, statuses map[string]map[int]int) (int, error) {
	rule, err := lim.Prepare(proposed)
	if err != nil {
		return 0, err
	}
	if rule, err = rule.WithEnforce(fraction); err != nil {
		return 0, err
	}
	in := 0
	for t := range statuses {
		if rule.Enforced("tenant:" + t) {
			in++
		}
	}
	return in, nil
}

// count returns the requests answered with status, over every tenant.
func count(statuses map[string]map[int]int, status int) int {
	n := 0
	for _, s := range statuses {
		n += s[status]
	}
	return n
}

// sum returns the sum of m's counts.
func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// top formats the k keys of m with the largest counts, largest first.
func top(m map[string]int, k int) string {
	if len(m) == 0 {
		return "no tenant"
	}
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var parts []string
	for _, key := range keys[:min(k, len(keys))] {
		parts = append(parts, fmt.Sprintf("%s %d", key, m[key]))
	}
	if len(keys) > k {
		parts = append(parts, fmt.Sprintf("%d more", len(keys)-k))
	}
	return strings.Join(parts, ", ")
}
