package sluiceprom

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/sluicehq/sluice/core"
)

// newTest returns a Collector registered with a fresh pedantic registry.
func newTest(t *testing.T, opts ...Option) (*Collector, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	c, err := New(append([]Option{WithRegisterer(reg)}, opts...)...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return c, reg
}

func TestCollector(t *testing.T) {
	c, reg := newTest(t)
	perMin := core.PerMinute(2).WithName("api")
	c.ObserveDecision(core.Result{Allowed: true, Limit: perMin}, core.SourceStore)
	c.ObserveDecision(core.Result{Limit: perMin}, core.SourceStore)
	c.ObserveDecision(core.Result{Limit: perMin, Locked: true}, core.SourceDenyCache)
	c.ObserveDecision(core.Result{Allowed: true, Limit: core.PerSecond(5)}, core.SourceFallback)
	c.ObserveDecision(core.Result{}, core.SourceFailClosed)
	const a, b = "10.0.0.1:6379", "10.0.0.2:6379"
	c.ObserveStore(core.StoreCall{Node: a, Latency: time.Millisecond})
	c.ObserveStore(core.StoreCall{Node: b, Latency: 50 * time.Millisecond, Err: context.DeadlineExceeded})
	c.ObserveStore(core.StoreCall{Node: b, Latency: time.Millisecond, Err: errors.New("READONLY You can't write against a read only replica.")})
	c.ObserveStore(core.StoreCall{Node: b, Latency: time.Millisecond, Err: redisErr("READONLY You can't write against a read only replica.")})
	c.ObserveStore(core.StoreCall{Node: a, Latency: 80 * time.Millisecond, Err: context.DeadlineExceeded, Paused: true})
	start := time.Now().Add(-2 * time.Second)
	c.ObserveDegraded(core.StoreOutage{Node: b, Start: start, Err: errors.New("down")})
	if got := testutil.ToFloat64(c.up.WithLabelValues(b)); got != 0 {
		t.Fatalf("sluice_store_up{node=b} during b's outage = %v, want 0", got)
	}
	if got := testutil.ToFloat64(c.up.WithLabelValues(a)); got != 1 {
		t.Fatalf("sluice_store_up{node=a} during b's outage = %v, want 1", got)
	}
	c.ObserveRecovered(core.StoreOutage{Node: b, Start: start, Duration: 1500 * time.Millisecond})

	tests := []struct {
		name string
		got  prometheus.Collector
		want float64
	}{
		{"allowed by the store", c.decisions.WithLabelValues("allowed", "store", "api", "false"), 1},
		{"denied by the store", c.decisions.WithLabelValues("denied", "store", "api", "false"), 1},
		{"locked from the deny cache", c.decisions.WithLabelValues("locked", "deny_cache", "api", "false"), 1},
		{"fallback, unnamed limit", c.decisions.WithLabelValues("allowed", "fallback", "unnamed", "false"), 1},
		{"fail closed", c.decisions.WithLabelValues("denied", "fail_closed", "", "false"), 1},
		{"timeouts of b", c.storeErrs.WithLabelValues(b, "timeout"), 1},
		{"a READONLY reply of b", c.storeErrs.WithLabelValues(b, "readonly"), 1},
		{"an unclassified error of b", c.storeErrs.WithLabelValues(b, "other"), 1},
		{"timeouts of a", c.storeErrs.WithLabelValues(a, "timeout"), 0},
		{"a timeout of a while this process was paused", c.storeErrs.WithLabelValues(a, "paused"), 1},
		{"outages of b", c.outages.WithLabelValues(b), 1},
		{"outages of a", c.outages.WithLabelValues(a), 0},
		{"b up again", c.up.WithLabelValues(b), 1},
	}
	for _, tt := range tests {
		if got := testutil.ToFloat64(tt.got); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, got, tt.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_store_latency_seconds"); err != nil || n != 4 {
		t.Errorf("latency series = %d, %v; want 4 (ok and error for each node)", n, err)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_store_errors_total"); err != nil || n != 24 {
		t.Errorf("error series = %d, %v; want 24 (every reason of each node, from zero)", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestOutageInProgress: an outage's time so far shows at every scrape, not
// only once it ends.
func TestOutageInProgress(t *testing.T) {
	const node = "10.0.0.2:6379"
	hourAgo := time.Now().Add(-time.Hour)
	type step struct {
		name     string
		do       func(c *Collector)
		min, max float64 // the node's outage seconds at the next scrape
		up       float64
	}
	steps := []step{
		{"first seen", func(c *Collector) { c.ObserveStore(core.StoreCall{Node: node, Latency: time.Millisecond}) }, 0, 0, 1},
		{"an hour into an outage", func(c *Collector) { c.ObserveDegraded(core.StoreOutage{Node: node, Start: hourAgo}) }, 3600, 3660, 0},
		{"recovered after 90 minutes", func(c *Collector) {
			c.ObserveRecovered(core.StoreOutage{Node: node, Start: hourAgo, Duration: 90 * time.Minute})
		}, 5400, 5400, 1},
		{"a second outage, begun now", func(c *Collector) { c.ObserveDegraded(core.StoreOutage{Node: node, Start: time.Now()}) }, 5400, 5460, 0},
	}
	c, reg := newTest(t)
	for _, s := range steps {
		s.do(c)
		if got := outageSeconds(t, reg, "sluice_store_outage_seconds_total", node); got < s.min || got > s.max {
			t.Errorf("%s: sluice_store_outage_seconds_total = %v, want in [%v, %v]", s.name, got, s.min, s.max)
		}
		if got := testutil.ToFloat64(c.up.WithLabelValues(node)); got != s.up {
			t.Errorf("%s: sluice_store_up = %v, want %v", s.name, got, s.up)
		}
	}
}

func TestDryRun(t *testing.T) {
	c, reg := newTest(t)
	trial := core.PerMinute(100).WithName("export")
	decisions := []core.Result{
		{Allowed: true, Limit: trial},
		{Limit: trial},
		{Allowed: true, Limit: trial, DryRun: true},
		{Limit: trial, DryRun: true},
		{Limit: trial, DryRun: true},
	}
	for _, res := range decisions {
		c.ObserveDecision(res, core.SourceStore)
	}
	c.ObserveDecision(core.Result{DryRun: true}, core.SourceFailClosed)
	want := `
# HELP sluice_decisions_total Rate-limit decisions by outcome (allowed, denied, locked), source (store, deny_cache, fallback, fail_open, fail_closed), limit (its name, "unnamed" or "other") and dry_run (true, false).
# TYPE sluice_decisions_total counter
sluice_decisions_total{dry_run="false",limit="export",outcome="allowed",source="store"} 1
sluice_decisions_total{dry_run="false",limit="export",outcome="denied",source="store"} 1
sluice_decisions_total{dry_run="true",limit="export",outcome="allowed",source="store"} 1
sluice_decisions_total{dry_run="true",limit="export",outcome="denied",source="store"} 2
sluice_decisions_total{dry_run="true",limit="",outcome="denied",source="fail_closed"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_decisions_total"); err != nil {
		t.Error(err)
	}
}

// TestWait: sluice_wait_seconds observes the waits of admitted
// reservations, by limit and dry_run, and nothing for an admission that
// need not wait or a denial.
func TestWait(t *testing.T) {
	c, reg := newTest(t, WithMaxLimitNames(1))
	api := core.PerMinute(100).WithName("api")
	const ms = time.Millisecond
	for _, res := range []core.Result{
		{Allowed: true, Wait: 30 * ms, Limit: api},
		{Allowed: true, Wait: 2 * time.Second, Limit: api},
		{Allowed: true, Limit: api},                                // at once: not a wait
		{Limit: api, RetryAfter: time.Second},                      // denied
		{Allowed: true, Wait: 10 * ms, Limit: api, DryRun: true},   // a dry-run rule's
		{Allowed: true, Wait: 40 * ms, Limit: core.PerSecond(5)},   // unnamed
		{Allowed: true, Wait: 50 * ms, Limit: api.WithName("b")},   // beyond the bound
		{Allowed: true, Wait: 70 * ms, Limit: api.WithName("c")},   // beyond the bound
		{Allowed: true, Wait: 90 * ms, Limit: api.WithName("c")},   // beyond the bound
		{Allowed: true, Wait: 20 * ms, Limit: api, Degraded: true}, // the local fallback's
	} {
		c.ObserveDecision(res, core.SourceStore)
	}
	c.ObserveDecision(core.Result{}, core.SourceFailClosed)
	want := map[string]hist{
		`dry_run="false",limit="api"`:     {3, 2.05},
		`dry_run="true",limit="api"`:      {1, .01},
		`dry_run="false",limit="unnamed"`: {1, .04},
		`dry_run="false",limit="other"`:   {3, .21},
	}
	got := histograms(t, reg, "sluice_wait_seconds")
	if len(got) != len(want) {
		t.Errorf("sluice_wait_seconds has %d series, want %d: %v", len(got), len(want), got)
	}
	for labels, w := range want {
		if g, ok := got[labels]; !ok || g.count != w.count || math.Abs(g.sum-w.sum) > 1e-9 {
			t.Errorf("sluice_wait_seconds{%s} = %+v (found %v), want %+v", labels, g, ok, w)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestLimitCardinality: however many distinct limits a service uses, the
// limit label and the Collector's own maps stay bounded.
func TestLimitCardinality(t *testing.T) {
	tests := []struct {
		name       string
		opts       []Option
		limit      func(i int) core.Limit
		wantValues []string // some values of the limit label that must be there
		wantN      int      // distinct values of the limit label
	}{
		{
			name:       "1,000 named limits, default bound",
			limit:      func(i int) core.Limit { return core.PerMinute(60).WithName(fmt.Sprintf("tenant-%d", i)) },
			wantValues: []string{"tenant-0", "tenant-99", "other"},
			wantN:      101,
		},
		{
			name:       "1,000 named limits, bound 10",
			opts:       []Option{WithMaxLimitNames(10)},
			limit:      func(i int) core.Limit { return core.PerMinute(60).WithName(fmt.Sprintf("tenant-%d", i)) },
			wantValues: []string{"tenant-0", "tenant-9", "other"},
			wantN:      11,
		},
		{
			name:       "1,000 unnamed limits of different rates",
			limit:      func(i int) core.Limit { return core.PerMinute(60 + i) },
			wantValues: []string{"unnamed"},
			wantN:      1,
		},
		{
			name: "a few named limits and 1,000 unnamed ones",
			limit: func(i int) core.Limit {
				if i%100 == 0 {
					return core.PerHour(1000).WithName(fmt.Sprintf("plan-%d", i/100))
				}
				return core.PerSecond(i)
			},
			wantValues: []string{"plan-0", "plan-9", "unnamed"},
			wantN:      11,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, reg := newTest(t, tt.opts...)
			for i := range 1000 {
				c.ObserveDecision(core.Result{Allowed: true, Wait: time.Millisecond, Limit: tt.limit(i)}, core.SourceStore)
				c.ObserveDecision(core.Result{Limit: tt.limit(i)}, core.SourceDenyCache)
			}
			// A name admitted before the bound was reached keeps its value.
			c.ObserveDecision(core.Result{Allowed: true, Limit: tt.limit(0)}, core.SourceStore)

			values := labelValues(t, reg, "sluice_decisions_total", "limit")
			if len(values) != tt.wantN {
				t.Errorf("limit label has %d values, want %d", len(values), tt.wantN)
			}
			for _, v := range tt.wantValues {
				if values[v] == 0 {
					t.Errorf("limit label lacks %q", v)
				}
			}
			if n := len(c.series); n != 2*tt.wantN {
				t.Errorf("the collector holds %d series, want %d", n, 2*tt.wantN)
			}
			if n := len(c.waitSeries); n != tt.wantN {
				t.Errorf("the collector holds %d wait series, want %d", n, tt.wantN)
			}
			if waits := histograms(t, reg, "sluice_wait_seconds"); len(waits) != tt.wantN {
				t.Errorf("sluice_wait_seconds has %d series, want %d: %v", len(waits), tt.wantN, waits)
			}
			if got := values[tt.limit(0).Name]; tt.limit(0).Name != "" && got != 3 {
				t.Errorf("decisions of the first limit = %v, want 3", got)
			}
			total := 0.0
			for _, v := range values {
				total += v
			}
			if total != 2001 {
				t.Errorf("decisions counted = %v, want 2001: none may be lost", total)
			}
		})
	}
}

// TestLimitBoundConcurrent: names arriving at once never overrun the bound.
func TestLimitBoundConcurrent(t *testing.T) {
	c, reg := newTest(t, WithMaxLimitNames(5))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				c.ObserveDecision(core.Result{Allowed: true, Wait: time.Millisecond, Limit: core.PerSecond(1).WithName(fmt.Sprintf("n%d-%d", g, i%20))}, core.SourceStore)
			}
		}()
	}
	wg.Wait()
	values := labelValues(t, reg, "sluice_decisions_total", "limit")
	if len(values) != 6 || values["other"] == 0 {
		t.Errorf("limit values = %v, want 5 names and other", values)
	}
	total := 0.0
	for _, v := range values {
		total += v
	}
	if total != 1600 {
		t.Errorf("decisions counted = %v, want 1600", total)
	}
	var waits uint64
	for labels, h := range histograms(t, reg, "sluice_wait_seconds") {
		waits += h.count
		if limit := strings.TrimSuffix(strings.TrimPrefix(labels, `dry_run="false",limit="`), `"`); values[limit] == 0 {
			t.Errorf("sluice_wait_seconds{%s}: a limit label the decisions do not have", labels)
		}
	}
	if waits != 1600 {
		t.Errorf("waits observed = %v, want 1600", waits)
	}
}

// TestSharedRegistry: collectors with different constant labels share one
// registry; those that would export the same series do not.
func TestSharedRegistry(t *testing.T) {
	tests := []struct {
		name    string
		first   []Option
		second  []Option
		wantErr bool
	}{
		{"different constant label values",
			[]Option{WithConstLabels(prometheus.Labels{"limiter": "public"})},
			[]Option{WithConstLabels(prometheus.Labels{"limiter": "internal"})}, false},
		{"different namespaces",
			[]Option{WithNamespace("public")},
			[]Option{WithNamespace("internal")}, false},
		{"the same constant labels", nil, nil, true},
		{"different constant label names",
			[]Option{WithConstLabels(prometheus.Labels{"limiter": "public"})},
			[]Option{WithConstLabels(prometheus.Labels{"service": "internal"})}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			first, err := New(append(tt.first, WithRegisterer(reg))...)
			if err != nil {
				t.Fatalf("first New() = %v", err)
			}
			second, err := New(append(tt.second, WithRegisterer(reg))...)
			if tt.wantErr {
				if err == nil || !strings.HasPrefix(err.Error(), "sluiceprom: ") {
					t.Fatalf("second New() = %v, want a sluiceprom error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("second New() = %v", err)
			}
			first.ObserveDecision(core.Result{Allowed: true, Limit: core.PerSecond(1).WithName("a")}, core.SourceStore)
			second.ObserveDecision(core.Result{Allowed: true, Limit: core.PerSecond(1).WithName("b")}, core.SourceStore)
			first.ObserveStore(core.StoreCall{Node: "redis:6379", Latency: time.Millisecond})
			second.ObserveStore(core.StoreCall{Node: "redis:6379", Latency: time.Millisecond})
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatalf("Gather() = %v", err)
			}
			decisions, ups := 0, 0
			for _, mf := range mfs {
				switch {
				case strings.HasSuffix(mf.GetName(), "_decisions_total"):
					decisions += len(mf.GetMetric())
				case strings.HasSuffix(mf.GetName(), "_store_up"):
					ups += len(mf.GetMetric())
				}
			}
			if decisions != 2 || ups != 2 {
				t.Errorf("gathered %d decision series and %d store_up series, want 2 of each (one per collector)", decisions, ups)
			}
			if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
				t.Errorf("lint: %v %v", problems, err)
			}
		})
	}
}

func TestAlreadyRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(WithRegisterer(reg)); err != nil {
		t.Fatal(err)
	}
	_, err := New(WithRegisterer(reg))
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("New() on a registry that has one = %v, want a prometheus.AlreadyRegisteredError", err)
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name     string
		opts     []Option
		wantErr  string   // substring of New's error; "" for success
		families []string // families the registry must have after one observation of each kind
	}{
		{"defaults", nil, "", []string{"sluice_decisions_total", "sluice_wait_seconds", "sluice_store_up", "sluice_store_outages_total",
			"sluice_store_outage_seconds_total", "sluice_store_errors_total", "sluice_store_latency_seconds"}},
		{"namespace", []Option{WithNamespace("edge")}, "", []string{"edge_decisions_total", "edge_wait_seconds", "edge_store_up",
			"edge_store_outages_total", "edge_store_outage_seconds_total", "edge_store_errors_total", "edge_store_latency_seconds"}},
		{"no namespace", []Option{WithNamespace("")}, "", []string{"decisions_total", "wait_seconds", "store_latency_seconds"}},
		{"last namespace wins", []Option{WithNamespace("a"), WithNamespace("b")}, "", []string{"b_decisions_total"}},
		{"constant labels", []Option{WithConstLabels(prometheus.Labels{"region": "eu", "limiter": "api"})}, "", []string{"sluice_decisions_total"}},
		{"buckets", []Option{WithBuckets(0.001, 0.01, 0.1)}, "", []string{"sluice_store_latency_seconds"}},
		{"a constant label named like a label", []Option{WithConstLabels(prometheus.Labels{"limit": "x"})}, `constant label "limit"`, nil},
		{"a constant label named le", []Option{WithConstLabels(prometheus.Labels{"le": "x"})}, `constant label "le"`, nil},
		{"an empty label name", []Option{WithConstLabels(prometheus.Labels{"": "x"})}, "not a valid label name", nil},
		{"a reserved label name", []Option{WithConstLabels(prometheus.Labels{"__name__": "x"})}, "not a valid label name", nil},
		{"buckets not increasing", []Option{WithBuckets(0.1, 0.1)}, "do not increase", nil},
		{"buckets decreasing", []Option{WithBuckets(1, 0.5)}, "do not increase", nil},
		{"a bound of zero", []Option{WithMaxLimitNames(0)}, "at least 1", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			c, err := New(append(tt.opts, WithRegisterer(reg))...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "sluiceprom: ") {
					t.Fatalf("New() = %v, want an error with %q", err, tt.wantErr)
				}
				if mfs, _ := reg.Gather(); len(mfs) != 0 {
					t.Errorf("a failed New() registered %d families", len(mfs))
				}
				return
			}
			if err != nil {
				t.Fatalf("New() = %v", err)
			}
			c.ObserveDecision(core.Result{Allowed: true, Limit: core.PerSecond(1)}, core.SourceStore)
			c.ObserveDecision(core.Result{Allowed: true, Wait: time.Second, Limit: core.PerSecond(1)}, core.SourceStore)
			c.ObserveStore(core.StoreCall{Node: "redis:6379", Latency: 5 * time.Millisecond})
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatalf("Gather() = %v", err)
			}
			got := map[string]*dto.MetricFamily{}
			for _, mf := range mfs {
				got[mf.GetName()] = mf
			}
			for _, name := range tt.families {
				if got[name] == nil {
					t.Errorf("no family %s; have %v", name, keys(got))
				}
			}
			if mf := got["sluice_store_latency_seconds"]; mf != nil && tt.name == "buckets" {
				if n := len(mf.GetMetric()[0].GetHistogram().GetBucket()); n != 3 {
					t.Errorf("latency histogram has %d buckets, want 3", n)
				}
			}
			if mf := got["sluice_wait_seconds"]; mf != nil {
				if n := len(mf.GetMetric()[0].GetHistogram().GetBucket()); n != len(waitBuckets) {
					t.Errorf("wait histogram has %d buckets, want %d whatever WithBuckets says", n, len(waitBuckets))
				}
			}
			if tt.name == "constant labels" {
				for _, mf := range mfs {
					for _, m := range mf.GetMetric() {
						if l := labelsOf(m); l["region"] != "eu" || l["limiter"] != "api" {
							t.Errorf("%s has labels %v, want region=eu and limiter=api", mf.GetName(), l)
						}
					}
				}
			}
		})
	}
}

// TestDefaultRegisterer: without WithRegisterer, New registers with
// prometheus.DefaultRegisterer; with nil, nowhere.
func TestDefaultRegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	old := prometheus.DefaultRegisterer
	prometheus.DefaultRegisterer = reg
	t.Cleanup(func() { prometheus.DefaultRegisterer = old })

	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if !reg.Unregister(c) {
		t.Error("New() did not register with prometheus.DefaultRegisterer")
	}
	c, err = New(WithRegisterer(nil))
	if err != nil {
		t.Fatal(err)
	}
	if reg.Unregister(c) {
		t.Error("New(WithRegisterer(nil)) registered with prometheus.DefaultRegisterer")
	}
	if err := reg.Register(c); err != nil {
		t.Errorf("registering an unregistered collector: %v", err)
	}
}

func TestObserveDecisionNoAlloc(t *testing.T) {
	c, _ := newTest(t, WithMaxLimitNames(1))
	c.ObserveDecision(core.Result{Limit: core.PerSecond(1).WithName("first")}, core.SourceStore)
	tests := []struct {
		name string
		res  core.Result
	}{
		{"unnamed", core.Result{Allowed: true, Limit: core.PerMinute(600)}},
		{"named", core.Result{Allowed: true, Limit: core.PerMinute(600).WithName("first")}},
		{"beyond the bound", core.Result{Allowed: true, Limit: core.PerMinute(600).WithName("second")}},
		{"dry run", core.Result{Limit: core.PerMinute(600).WithName("first"), DryRun: true}},
		{"waited", core.Result{Allowed: true, Wait: 30 * time.Millisecond, Limit: core.PerMinute(600).WithName("first")}},
		{"waited, unnamed", core.Result{Allowed: true, Wait: 30 * time.Millisecond, Limit: core.PerMinute(600)}},
		{"waited beyond the bound", core.Result{Allowed: true, Wait: 30 * time.Millisecond, Limit: core.PerMinute(600).WithName("second")}},
		{"waited in a dry run", core.Result{Allowed: true, Wait: 30 * time.Millisecond, Limit: core.PerMinute(600).WithName("first"), DryRun: true}},
	}
	for _, tt := range tests {
		c.ObserveDecision(tt.res, core.SourceStore)
		if a := testing.AllocsPerRun(1000, func() { c.ObserveDecision(tt.res, core.SourceStore) }); a != 0 {
			t.Errorf("ObserveDecision, %s, on a known series: %v allocs, want 0", tt.name, a)
		}
	}
}

// TestInvalidUTF8 never panics on a limit name or node that is not UTF-8.
func TestInvalidUTF8(t *testing.T) {
	c, reg := newTest(t)
	c.ObserveDecision(core.Result{Limit: core.PerSecond(1).WithName("bad\xff")}, core.SourceStore)
	c.ObserveStore(core.StoreCall{Node: "bad\xff", Latency: time.Millisecond})
	c.ObserveDegraded(core.StoreOutage{Node: "bad\xff", Start: time.Now()})
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("Gather() = %v", err)
	}
}

// TestWithLimiter wires the collector to an in-memory limiter, whose clock
// stands still: the second Wait reserves a token due in 50 ms.
func TestWithLimiter(t *testing.T) {
	c, reg := newTest(t)
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	lim, err := core.NewMemory(core.WithObserver(c), core.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		lim.Allow(ctx, "k", core.PerMinute(2))
	}
	if got := testutil.ToFloat64(c.decisions.WithLabelValues("denied", "store", "unnamed", "false")); got != 1 {
		t.Fatalf("denied = %v, want 1", got)
	}
	smooth := core.PerSecond(20).WithBurst(1).WithName("smooth")
	for range 2 {
		if _, err := lim.Wait(ctx, "w", 1, smooth); err != nil {
			t.Fatal(err)
		}
	}
	if got := histograms(t, reg, "sluice_wait_seconds")[`dry_run="false",limit="smooth"`]; got != (hist{1, .05}) {
		t.Errorf("sluice_wait_seconds{limit=smooth} = %+v, want one wait of 0.05 s", got)
	}
}

// redisErr is an error reply as go-redis returns it.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// outageSeconds scrapes reg for the value of family name at node.
func outageSeconds(t *testing.T, reg *prometheus.Registry, name, node string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelsOf(m)["node"] == node {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s for node %q", name, node)
	return 0
}

// labelValues scrapes reg and sums family name's counters by the value of
// label.
func labelValues(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				out[labelsOf(m)[label]] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// hist is one histogram series as the tests compare it.
type hist struct {
	count uint64
	sum   float64
}

// histograms scrapes reg for family name's histograms, by their labels
// written k="v",k="v" in name order.
func histograms(t *testing.T, reg *prometheus.Registry, name string) map[string]hist {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]hist{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var parts []string
			for _, l := range m.GetLabel() { // sorted by name
				parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			h := m.GetHistogram()
			out[strings.Join(parts, ",")] = hist{h.GetSampleCount(), h.GetSampleSum()}
		}
	}
	return out
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestConcurrencyMetrics: a cap's acquisitions, refusals and the slots
// held reach their series, and every kind of store call is counted by op.
func TestConcurrencyMetrics(t *testing.T) {
	c, reg := newTest(t)
	lim, err := core.NewMemory(core.WithObserver(c))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := lim.PrepareConcurrency(core.ConcurrencyLimit{Name: "uploads", Max: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var held []*core.Lease
	for range 3 {
		ls, err := cc.Acquire(ctx, "tenant:a")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls)
	}
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	c.ObserveStore(core.StoreCall{Node: "n", Op: core.OpAcquire})
	c.ObserveStore(core.StoreCall{Node: "n", Op: core.OpRelease, Err: context.DeadlineExceeded})
	c.ObserveStore(core.StoreCall{Node: "n", Op: "something new"})
	want := `
# HELP sluice_concurrency_acquisitions_total Concurrency-cap acquisitions by cap (its name, "unnamed" or "other"), outcome (acquired, refused) and source (store, fallback, fail_open).
# TYPE sluice_concurrency_acquisitions_total counter
sluice_concurrency_acquisitions_total{limit="uploads",outcome="acquired",source="store"} 2
sluice_concurrency_acquisitions_total{limit="uploads",outcome="refused",source="store"} 1
# HELP sluice_concurrency_in_flight Concurrency-cap slots this process holds, by cap (its name, "unnamed" or "other"); the sum over replicas is the cap's use.
# TYPE sluice_concurrency_in_flight gauge
sluice_concurrency_in_flight{limit="uploads"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_concurrency_acquisitions_total", "sluice_concurrency_in_flight"); err != nil {
		t.Error(err)
	}
	for _, tc := range []struct {
		op, result string
		want       float64
	}{{core.OpAcquire, "ok", 1}, {core.OpRelease, "error", 1}, {"other", "ok", 1}, {core.OpDecide, "ok", 0}} {
		if got := testutil.ToFloat64(c.calls.WithLabelValues("n", tc.op, tc.result)); got != tc.want {
			t.Errorf("store_calls_total{op=%q,result=%q} = %v, want %v", tc.op, tc.result, got, tc.want)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestThresholdEvents: sluice_threshold_events_total counts threshold
// events by limit, never by key: a named limit a decision admitted as a
// label, an unnamed one as "unnamed".
func TestThresholdEvents(t *testing.T) {
	c, reg := newTest(t)
	api := core.PerMinute(100).WithName("api")
	c.ObserveDecision(core.Result{Allowed: true, Warning: true, Limit: api}, core.SourceStore)
	c.ObserveThreshold(api)
	c.ObserveThreshold(api)
	c.ObserveThreshold(core.PerSecond(5))
	want := `
# HELP sluice_threshold_events_total Keys that crossed a rule's warning threshold (core.Rule.WithWarning), by limit (its name, "unnamed" or "other"): once per key, limit and window across the fleet, counted by the replica that raised the event.
# TYPE sluice_threshold_events_total counter
sluice_threshold_events_total{limit="api"} 2
sluice_threshold_events_total{limit="unnamed"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_threshold_events_total"); err != nil {
		t.Error(err)
	}
}
