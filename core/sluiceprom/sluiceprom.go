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
	decisions   *prometheus.CounterVec
	degraded    prometheus.Counter
	denyHits    prometheus.Counter
	up          prometheus.Gauge
	outages     prometheus.Counter
	outageSecs  prometheus.Counter
	storeErrs   prometheus.Counter
	latency     *prometheus.HistogramVec
	latencyOK   prometheus.Observer
	latencyFail prometheus.Observer

	mu     sync.RWMutex
	series map[seriesKey]prometheus.Counter
}

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
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_store_up",
			Help: "1 while the store answers, 0 during an outage.",
		}),
		outages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_outages_total",
			Help: "Store outages begun (switches to the failure policy).",
		}),
		outageSecs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_outage_seconds_total",
			Help: "Total length of the store outages that have ended, in seconds.",
		}),
		storeErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Store calls that failed.",
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_store_latency_seconds",
			Help:    "Store call latency in seconds, by result (ok, error).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"result"}),
		series: make(map[seriesKey]prometheus.Counter),
	}
	c.up.Set(1)
	c.latencyOK = c.latency.WithLabelValues("ok")
	c.latencyFail = c.latency.WithLabelValues("error")
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
}

func (c *Collector) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.decisions, c.degraded, c.denyHits, c.up, c.outages, c.outageSecs, c.storeErrs, c.latency}
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
func (c *Collector) ObserveStore(latency time.Duration, err error) {
	if err != nil {
		c.storeErrs.Inc()
		c.latencyFail.Observe(latency.Seconds())
		return
	}
	c.latencyOK.Observe(latency.Seconds())
}

// ObserveDegraded implements core.Observer.
func (c *Collector) ObserveDegraded(error) {
	c.up.Set(0)
	c.outages.Inc()
}

// ObserveRecovered implements core.Observer.
func (c *Collector) ObserveRecovered(outage time.Duration) {
	c.up.Set(1)
	c.outageSecs.Add(outage.Seconds())
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
