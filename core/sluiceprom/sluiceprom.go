package sluiceprom

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/core"
)

// Collector is a core.Observer that keeps Prometheus metrics and a
// prometheus.Collector that exports them. It is safe for concurrent use;
// recording a decision on a series seen before does not allocate.
type Collector struct {
	decisions  *prometheus.CounterVec
	degraded   prometheus.Counter
	denyHits   prometheus.Counter
	up         *prometheus.GaugeVec
	outages    *prometheus.CounterVec
	outageSecs *prometheus.Desc // computed at each scrape, see Collect
	storeErrs  *prometheus.CounterVec
	latency    *prometheus.HistogramVec

	mu     sync.RWMutex
	series map[seriesKey]prometheus.Counter

	nodesMu sync.RWMutex
	nodes   map[string]*nodeMetrics
}

// nodeMetrics holds one store node's series, made when the node is first
// seen so that its error counters start at zero for every reason.
type nodeMetrics struct {
	up          prometheus.Gauge
	latencyOK   prometheus.Observer
	latencyFail prometheus.Observer
	errs        map[string]prometheus.Counter // by reason; read-only once made

	mu        sync.Mutex
	ended     time.Duration // total length of the outages that have ended
	downSince time.Time     // start of the outage in progress; zero while up
}

// reasons are the values of the reason label, from core.ErrorReason.
var reasons = [...]string{core.ReasonTimeout, core.ReasonRefused, core.ReasonConnection, core.ReasonLoading,
	core.ReasonReadOnly, core.ReasonClusterDown, core.ReasonOOM, core.ReasonScript, core.ReasonOther}

type seriesKey struct {
	outcome int8
	source  core.Source
	limit   core.Limit
}

var outcomes = [...]string{"allowed", "denied", "locked"}

// New returns a Collector. Register it with a prometheus.Registerer and pass
// it to core.WithObserver.
func New() *Collector {
	c := &Collector{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Rate-limit decisions by outcome (allowed, denied, locked), source (store, deny_cache, fallback, fail_open, fail_closed) and limit.",
		}, []string{"outcome", "source", "limit"}),
		degraded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_degraded_decisions_total",
			Help: "Decisions made without the store, under the failure policy.",
		}),
		denyHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_deny_cache_hits_total",
			Help: "Denials answered by the local deny cache without a Redis call.",
		}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_store_up",
			Help: "Per store node: 1 while it answers, 0 while its circuit breaker is open.",
		}, []string{"node"}),
		outages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_outages_total",
			Help: "Per store node: outages begun (its keys switched to the failure policy).",
		}, []string{"node"}),
		outageSecs: prometheus.NewDesc("sluice_store_outage_seconds_total",
			"Per store node: total length of its outages in seconds, including the one in progress.",
			[]string{"node"}, nil),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Per store node: failed store calls by reason (timeout, refused, connection, loading, readonly, clusterdown, oom, script, other).",
		}, []string{"node", "reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_store_latency_seconds",
			Help:    "Per store node: store call latency in seconds, by result (ok, error).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"node", "result"}),
		series: make(map[seriesKey]prometheus.Counter),
		nodes:  make(map[string]*nodeMetrics),
	}
	return c
}

// node returns the series of the store node named name, making them the
// first time; a node starts up.
func (c *Collector) node(name string) *nodeMetrics {
	c.nodesMu.RLock()
	n := c.nodes[name]
	c.nodesMu.RUnlock()
	if n != nil {
		return n
	}
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	if n = c.nodes[name]; n != nil {
		return n
	}
	n = &nodeMetrics{
		up:          c.up.WithLabelValues(name),
		latencyOK:   c.latency.WithLabelValues(name, "ok"),
		latencyFail: c.latency.WithLabelValues(name, "error"),
		errs:        make(map[string]prometheus.Counter, len(reasons)),
	}
	for _, r := range reasons {
		n.errs[r] = c.storeErrs.WithLabelValues(name, r)
	}
	c.outages.WithLabelValues(name)
	n.up.Set(1)
	c.nodes[name] = n
	return n
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
	ch <- c.outageSecs
}

// Collect implements prometheus.Collector. Outage seconds include the time
// so far of outages still in progress, so a long outage shows while it
// lasts.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
	now := time.Now()
	c.nodesMu.RLock()
	defer c.nodesMu.RUnlock()
	for name, n := range c.nodes {
		n.mu.Lock()
		total := n.ended
		if !n.downSince.IsZero() {
			total += now.Sub(n.downSince)
		}
		n.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(c.outageSecs, prometheus.CounterValue, total.Seconds(), name)
	}
}

func (c *Collector) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.decisions, c.degraded, c.denyHits, c.up, c.outages, c.storeErrs, c.latency}
}

// ObserveDecision implements core.Observer.
func (c *Collector) ObserveDecision(res core.Result, src core.Source) {
	var k seriesKey
	switch {
	case res.Allowed:
		k.outcome = 0
	case res.Locked:
		k.outcome = 2
	default:
		k.outcome = 1
	}
	k.source, k.limit = src, res.Limit
	c.mu.RLock()
	ctr := c.series[k]
	c.mu.RUnlock()
	if ctr == nil {
		ctr = c.decisions.WithLabelValues(outcomes[k.outcome], src.String(), limitLabel(res.Limit))
		c.mu.Lock()
		c.series[k] = ctr
		c.mu.Unlock()
	}
	ctr.Inc()
	switch src {
	case core.SourceDenyCache:
		c.denyHits.Inc()
	case core.SourceFallback, core.SourceFailOpen, core.SourceFailClosed:
		c.degraded.Inc()
	}
}

// ObserveStore implements core.Observer.
func (c *Collector) ObserveStore(call core.StoreCall) {
	n := c.node(call.Node)
	if call.Err != nil {
		n.errs[core.ErrorReason(call.Err)].Inc()
		n.latencyFail.Observe(call.Latency.Seconds())
		return
	}
	n.latencyOK.Observe(call.Latency.Seconds())
}

// ObserveDegraded implements core.Observer.
func (c *Collector) ObserveDegraded(o core.StoreOutage) {
	n := c.node(o.Node)
	n.mu.Lock()
	n.downSince = o.Start
	n.mu.Unlock()
	n.up.Set(0)
	c.outages.WithLabelValues(o.Node).Inc()
}

// ObserveRecovered implements core.Observer.
func (c *Collector) ObserveRecovered(o core.StoreOutage) {
	n := c.node(o.Node)
	n.mu.Lock()
	n.downSince = time.Time{}
	n.ended += o.Duration
	n.mu.Unlock()
	n.up.Set(1)
}

// limitLabel names a limit in the limit label.
func limitLabel(l core.Limit) string {
	if l.Name != "" {
		return l.Name
	}
	if l.Rate == 0 {
		return ""
	}
	return strconv.Itoa(l.Rate) + "/" + l.Period.String()
}

var _ core.Observer = (*Collector)(nil)
var _ prometheus.Collector = (*Collector)(nil)
