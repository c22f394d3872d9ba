package sluiceprom

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/core"
)

// Values of the limit label that are not limit names.
const (
	labelUnnamed = "unnamed" // a limit without a Name
	labelOther   = "other"   // a name beyond the Collector's bound
)

// Collector is a core.Observer that keeps Prometheus metrics and a
// prometheus.Collector that exports them. Make one with [New]; the zero
// value is not usable. It is safe for concurrent use; recording a decision
// on a series seen before does not allocate.
type Collector struct {
	decisions  *prometheus.CounterVec
	shares     *prometheus.CounterVec // denials by a shared level's gate (see core.Share)
	up         *prometheus.GaugeVec
	outages    *prometheus.CounterVec
	outageSecs *prometheus.Desc // computed at each scrape, see Collect
	storeErrs  *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	waits      *prometheus.HistogramVec
	calls      *prometheus.CounterVec
	acquires   *prometheus.CounterVec
	inFlight   *prometheus.GaugeVec
	leased     *prometheus.CounterVec
	inHand     *prometheus.GaugeVec
	warned     *prometheus.CounterVec
	shadow     *prometheus.CounterVec

	maxNames int

	mu         sync.RWMutex
	names      map[string]struct{} // limit names admitted as label values; at most maxNames
	series     map[seriesKey]prometheus.Counter
	waitSeries map[waitKey]prometheus.Observer // made at a series' first wait
	capSeries  map[capKey]prometheus.Counter
	capGauges  map[string]prometheus.Gauge      // by cap label
	shadows    map[seriesKey]prometheus.Counter // the shadow decisions' series; dryRun is always false

	nodesMu sync.RWMutex
	nodes   map[string]*nodeMetrics
}

// nodeMetrics holds one store node's series, made when the node is first
// seen so that its error counters start at zero for every reason.
type nodeMetrics struct {
	up          prometheus.Gauge
	outages     prometheus.Counter
	latencyOK   prometheus.Observer
	latencyFail prometheus.Observer
	errs        map[string]prometheus.Counter    // by reason; read-only once made
	calls       map[string][2]prometheus.Counter // by op: ok, error; read-only once made

	mu        sync.Mutex
	ended     time.Duration // total length of the outages that have ended
	downSince time.Time     // start of the outage in progress; zero while up
}

// reasons are the values of the reason label, from core.StoreCall.Reason.
var reasons = [...]string{core.ReasonTimeout, core.ReasonRefused, core.ReasonConnection, core.ReasonLoading,
	core.ReasonReadOnly, core.ReasonClusterDown, core.ReasonOOM, core.ReasonScript, core.ReasonAuth, core.ReasonNoPerm, core.ReasonOther, core.ReasonPaused}

// ops are the values of the op label, from core's Op constants; a kind
// of call not listed counts as "other".
var ops = [...]string{core.OpDecide, core.OpPeek, core.OpSettle, core.OpAcquire, core.OpRelease,
	core.OpRenew, core.OpReset, core.OpLock, core.OpHeartbeat, core.OpLease, core.OpLeaseReturn, core.OpPath, core.OpOverrides, core.OpTop, core.OpThreshold, labelOther}

// capKey names one series of the acquisitions counter; limit is a label
// value (see limitName).
type capKey struct {
	limit    string
	acquired bool
	source   core.Source
}

// seriesKey names one series of the decisions counter. limit is the label
// value (see limitLabel), never an unbounded string.
type seriesKey struct {
	outcome int8
	source  core.Source
	dryRun  bool
	limit   string
}

var outcomes = [...]string{"allowed", "denied", "locked"}

// waitKey names one series of the wait histogram; limit is a label value
// the decisions counter already has (see addSeries).
type waitKey struct {
	dryRun bool
	limit  string
}

// New returns a Collector, registered with prometheus.DefaultRegisterer
// unless [WithRegisterer] names another registerer (or nil, for none). Pass
// it to core.WithObserver; one Collector may serve several limiters, whose
// metrics then add up.
//
// New fails, registering nothing, if an option is invalid (a metric or label
// name Prometheus refuses, a constant label named like one of the
// Collector's labels, buckets that do not increase, a bound below 1), and
// returns the registerer's error if registration fails: for example a
// prometheus.AlreadyRegisteredError when a Collector with the same constant
// labels is registered there already.
func New(opts ...Option) (*Collector, error) {
	o := options{namespace: "sluice", registerer: prometheus.DefaultRegisterer, maxNames: defaultMaxNames}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("sluiceprom: %w", err)
	}
	if len(o.buckets) == 0 {
		o.buckets = defaultBuckets
	}
	name := func(n string) string { return prometheus.BuildFQName(o.namespace, "", n) }
	c := &Collector{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        name("decisions_total"),
			Help:        "Rate-limit decisions by outcome (allowed, denied, locked), source (store, deny_cache, fallback, fail_open, fail_closed), limit (its name, \"unnamed\" or \"other\") and dry_run (true, false).",
			ConstLabels: o.constLabels,
		}, []string{"outcome", "source", "limit", "dry_run"}),
		shares: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        name("share_denials_total"),
			Help:        "Denials by a path's shared level beyond its bucket (core.Share), by limit (as decisions_total's), reason (fair share, class reserve) and class (the request's, \"\" for none).",
			ConstLabels: o.constLabels,
		}, []string{"limit", "reason", "class"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        name("store_up"),
			Help:        "Per store node: 1 while it answers, 0 while its circuit breaker is open.",
			ConstLabels: o.constLabels,
		}, []string{"node"}),
		outages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        name("store_outages_total"),
			Help:        "Per store node: outages begun (its keys switched to the failure policy).",
			ConstLabels: o.constLabels,
		}, []string{"node"}),
		outageSecs: prometheus.NewDesc(name("store_outage_seconds_total"),
			"Per store node: total length of its outages in seconds, including the one in progress.",
			[]string{"node"}, o.constLabels),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        name("store_errors_total"),
			Help:        "Per store node: failed store calls by reason (timeout, refused, connection, loading, readonly, clusterdown, oom, script, auth, noperm, other).",
			ConstLabels: o.constLabels,
		}, []string{"node", "reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        name("store_latency_seconds"),
			Help:        "Per store node: store call latency in seconds, by result (ok, error).",
			Buckets:     o.buckets,
			ConstLabels: o.constLabels,
		}, []string{"node", "result"}),
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        name("wait_seconds"),
			Help:        "Time admitted reservations (Limiter.Wait, a middleware's WithWait) wait for their tokens in seconds, by limit (its name, \"unnamed\" or \"other\") and dry_run (true, false); admissions that need not wait are not observed.",
			Buckets:     waitBuckets,
			ConstLabels: o.constLabels,
		}, []string{"limit", "dry_run"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        name("store_calls_total"),
			Help:        "Per store node: store calls by op (decide, peek, settle, acquire, release, renew, reset, heartbeat, path) and result (ok, error).",
			ConstLabels: o.constLabels,
		}, []string{"node", "op", "result"}),
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        name("concurrency_acquisitions_total"),
			Help:        "Concurrency-cap acquisitions by cap (its name, \"unnamed\" or \"other\"), outcome (acquired, refused) and source (store, fallback, fail_open).",
			ConstLabels: o.constLabels,
		}, []string{"limit", "outcome", "source"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        name("concurrency_in_flight"),
			Help:        "Concurrency-cap slots this process holds, by cap (its name, \"unnamed\" or \"other\"); the sum over replicas is the cap's use.",
			ConstLabels: o.constLabels,
		}, []string{"limit"}),
		leased: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        name("lease_tokens_total"),
			Help:        "Token leases of hot keys (core.Rule.WithTokenLeases), by limit (its name, \"unnamed\" or \"other\") and kind: taken from Redis, spent (admitted locally), returned to Redis, lost (a lease ended with them in hand).",
			ConstLabels: o.constLabels,
		}, []string{"limit", "kind"}),
		inHand: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        name("lease_tokens_in_hand"),
			Help:        "Tokens this process holds in token leases, by limit, as of each lease's last call; the sum over replicas is at most the rule's LeaseBound.",
			ConstLabels: o.constLabels,
		}, []string{"limit"}),
		warned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        name("threshold_events_total"),
			Help:        "Keys that crossed a rule's warning threshold (core.Rule.WithWarning), by limit (its name, \"unnamed\" or \"other\"): once per key, limit and window across the fleet, counted by the replica that raised the event.",
			ConstLabels: o.constLabels,
		}, []string{"limit"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        name("shadow_decisions_total"),
			Help:        "Decisions of shadow limits (core.Rule.WithShadowLimits), which enforce nothing, by the outcome they would have had (allowed, denied), source (as in decisions_total), limit (the shadow limit's name, \"unnamed\" or \"other\") and mode (shadow).",
			ConstLabels: o.constLabels,
		}, []string{"outcome", "source", "limit", "mode"}),
		maxNames:   o.maxNames,
		names:      make(map[string]struct{}),
		series:     make(map[seriesKey]prometheus.Counter),
		waitSeries: make(map[waitKey]prometheus.Observer),
		capSeries:  make(map[capKey]prometheus.Counter),
		capGauges:  make(map[string]prometheus.Gauge),
		shadows:    make(map[seriesKey]prometheus.Counter),
		nodes:      make(map[string]*nodeMetrics),
	}
	// A private registry checks every name and label before the Collector
	// is used: a bad descriptor would otherwise panic on the request path,
	// when a series is first made.
	if err := prometheus.NewPedanticRegistry().Register(c); err != nil {
		return nil, fmt.Errorf("sluiceprom: %w", err)
	}
	if o.registerer != nil {
		if err := o.registerer.Register(c); err != nil {
			return nil, fmt.Errorf("sluiceprom: registering the collector: %w", err)
		}
	}
	return c, nil
}

// reservedLabels are the Collector's own label names.
var reservedLabels = []string{"outcome", "source", "limit", "dry_run", "mode", "node", "reason", "result", "op", "le", "class"}

func (o *options) validate() error {
	for name := range o.constLabels {
		for _, r := range reservedLabels {
			if name == r {
				return fmt.Errorf("constant label %q is one of the collector's own labels", name)
			}
		}
	}
	for i, b := range o.buckets {
		if math.IsNaN(b) || i > 0 && b <= o.buckets[i-1] {
			return fmt.Errorf("buckets %v do not increase strictly", o.buckets)
		}
	}
	if o.maxNames < 1 {
		return errors.New("WithMaxLimitNames: the bound must be at least 1")
	}
	return nil
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
	label := validUTF8(name)
	n = &nodeMetrics{
		up:          c.up.WithLabelValues(label),
		outages:     c.outages.WithLabelValues(label),
		latencyOK:   c.latency.WithLabelValues(label, "ok"),
		latencyFail: c.latency.WithLabelValues(label, "error"),
		errs:        make(map[string]prometheus.Counter, len(reasons)),
		calls:       make(map[string][2]prometheus.Counter, len(ops)),
	}
	for _, r := range reasons {
		n.errs[r] = c.storeErrs.WithLabelValues(label, r)
	}
	for _, op := range ops {
		n.calls[op] = [2]prometheus.Counter{c.calls.WithLabelValues(label, op, "ok"), c.calls.WithLabelValues(label, op, "error")}
	}
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
		ch <- prometheus.MustNewConstMetric(c.outageSecs, prometheus.CounterValue, total.Seconds(), validUTF8(name))
	}
}

func (c *Collector) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.decisions, c.shares, c.up, c.outages, c.storeErrs, c.latency, c.waits, c.calls, c.acquires, c.inFlight, c.leased, c.inHand, c.warned, c.shadow}
}

// ObserveDecision implements core.Observer.
func (c *Collector) ObserveDecision(res core.Result, src core.Source) {
	if res.Shadow.Len() > 0 {
		c.observeShadows(res.Shadow, src)
	}
	k := seriesKey{source: src, dryRun: res.DryRun}
	switch {
	case res.Allowed:
		k.outcome = 0
	case res.Locked:
		k.outcome = 2
	default:
		k.outcome = 1
	}
	waited := res.Allowed && res.Wait > 0
	var hist prometheus.Observer
	c.mu.RLock()
	k.limit = c.limitLabel(res.LevelLimit(labelUnnamed))
	ctr := c.series[k]
	if waited {
		hist = c.waitSeries[waitKey{dryRun: k.dryRun, limit: k.limit}]
	}
	c.mu.RUnlock()
	if ctr == nil {
		ctr, k.limit = c.addSeries(k)
	}
	ctr.Inc()
	if res.Reason != "" {
		// Bounded: the reasons are two, the classes a rule's own (at most
		// eight a level, named in its configuration).
		c.shares.WithLabelValues(k.limit, res.Reason, res.Class).Inc()
	}
	if !waited {
		return
	}
	if hist == nil {
		hist = c.addWaitSeries(waitKey{dryRun: k.dryRun, limit: k.limit})
	}
	hist.Observe(res.Wait.Seconds())
}

// limitLabel returns l's limit label: "" for no limit (a fail_closed
// decision), "unnamed" for a limit without a Name, the Name if it is one of
// the names admitted or may still be admitted, and "other" once maxNames
// names are. The caller holds c.mu, for reading at least.
func (c *Collector) limitLabel(l core.Limit) string {
	switch {
	case l.Name != "":
		if _, ok := c.names[l.Name]; ok || len(c.names) < c.maxNames {
			return l.Name
		}
		return labelOther
	case l == core.Limit{}:
		return ""
	}
	return labelUnnamed
}

// addSeries makes the series of k, admitting its limit name if there is
// still room, and returns its counter and the limit label it has: k's, or
// "other" if the name came too late.
func (c *Collector) addSeries(k seriesKey) (prometheus.Counter, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctr := c.series[k]; ctr != nil {
		return ctr, k.limit
	}
	// k.limit is a name that was not admitted when it was read.
	if k.limit = c.admitName(k.limit); k.limit == labelOther {
		if ctr := c.series[k]; ctr != nil {
			return ctr, k.limit
		}
	}
	ctr := c.decisions.WithLabelValues(outcomes[k.outcome], k.source.String(), validUTF8(k.limit), boolLabel(k.dryRun))
	c.series[k] = ctr
	return ctr, k.limit
}

// admitName returns the limit label of limit, a label limitLabel gave:
// limit itself, admitted as a name if it is one and there is still room,
// or "other" if there is none. The caller holds c.mu for writing.
func (c *Collector) admitName(limit string) string {
	if limit == "" || limit == labelUnnamed || limit == labelOther {
		return limit
	}
	if _, ok := c.names[limit]; !ok {
		if len(c.names) >= c.maxNames {
			return labelOther
		}
		c.names[limit] = struct{}{}
	}
	return limit
}

// observeShadows counts the decision of each shadow limit of s, made by
// src, by the outcome it would have had.
func (c *Collector) observeShadows(s core.Shadows, src core.Source) {
	for i := range s.Len() {
		k := seriesKey{source: src}
		if s.Denied(i) {
			k.outcome = 1
		}
		c.mu.RLock()
		k.limit = c.limitLabel(s.Limit(i))
		ctr := c.shadows[k]
		c.mu.RUnlock()
		if ctr == nil {
			ctr = c.addShadowSeries(k)
		}
		ctr.Inc()
	}
}

// addShadowSeries makes the shadow decisions' series of k, as addSeries
// makes a decisions series, and returns its counter.
func (c *Collector) addShadowSeries(k seriesKey) prometheus.Counter {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctr := c.shadows[k]; ctr != nil {
		return ctr
	}
	k.limit = c.admitName(k.limit)
	if ctr := c.shadows[k]; ctr != nil {
		return ctr
	}
	ctr := c.shadow.WithLabelValues(outcomes[k.outcome], k.source.String(), validUTF8(k.limit), "shadow")
	c.shadows[k] = ctr
	return ctr
}

// addWaitSeries makes the wait histogram's series of k and returns it.
// k.limit is a label value addSeries returned, so the names stay bounded.
func (c *Collector) addWaitSeries(k waitKey) prometheus.Observer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.waitSeries[k]; h != nil {
		return h
	}
	h := c.waits.WithLabelValues(validUTF8(k.limit), boolLabel(k.dryRun))
	c.waitSeries[k] = h
	return h
}

// boolLabel is the dry_run label's value.
func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// ObserveStore implements core.Observer.
func (c *Collector) ObserveStore(call core.StoreCall) {
	n := c.node(call.Node)
	calls, ok := n.calls[call.Op]
	if !ok {
		calls = n.calls[labelOther]
	}
	if call.Err != nil {
		calls[1].Inc()
	} else {
		calls[0].Inc()
	}
	if call.Err != nil {
		n.errs[call.Reason()].Inc()
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
	n.outages.Inc()
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

// validUTF8 makes s a valid label value: Prometheus refuses (and
// WithLabelValues panics on) invalid UTF-8.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// ObserveAcquire implements core.ConcurrencyObserver.
func (c *Collector) ObserveAcquire(limit core.ConcurrencyLimit, acquired bool, src core.Source) {
	c.mu.RLock()
	k := capKey{limit: c.limitName(limit.Name), acquired: acquired, source: src}
	ctr, g := c.capSeries[k], c.capGauges[k.limit]
	c.mu.RUnlock()
	if ctr == nil || g == nil {
		ctr, g = c.addCapSeries(k)
	}
	ctr.Inc()
	if acquired {
		g.Inc()
	}
}

// ObserveRelease implements core.ConcurrencyObserver.
func (c *Collector) ObserveRelease(limit core.ConcurrencyLimit) {
	c.mu.RLock()
	g := c.capGauges[c.limitName(limit.Name)]
	c.mu.RUnlock()
	if g == nil {
		_, g = c.addCapSeries(capKey{limit: c.limitName(limit.Name), acquired: true})
	}
	g.Dec()
}

// ObserveTokenLease implements core.LeaseObserver. It runs once per lease
// call, not per decision.
func (c *Collector) ObserveTokenLease(limit core.Limit, ev core.LeaseEvent) {
	c.mu.RLock()
	label := c.limitLabel(limit)
	if _, ok := c.names[label]; !ok && limit.Name != "" {
		label = labelOther // the name was never admitted by a decision
	}
	c.mu.RUnlock()
	label = validUTF8(label)
	for _, k := range [...]struct {
		kind string
		n    int64
	}{{"taken", ev.Taken}, {"spent", ev.Spent}, {"returned", ev.Returned}, {"lost", ev.Lost}} {
		if k.n > 0 {
			c.leased.WithLabelValues(label, k.kind).Add(float64(k.n))
		}
	}
	c.inHand.WithLabelValues(label).Add(float64(ev.Taken - ev.Spent - ev.Returned - ev.Lost))
}

// ObserveThreshold implements core.ThresholdObserver. It runs once per
// threshold event, not per decision; the key is never a label.
func (c *Collector) ObserveThreshold(limit core.Limit) {
	c.mu.RLock()
	label := c.limitLabel(limit)
	if _, ok := c.names[label]; !ok && limit.Name != "" {
		label = labelOther // the name was never admitted by a decision
	}
	c.mu.RUnlock()
	c.warned.WithLabelValues(validUTF8(label)).Inc()
}

// limitName is limitLabel for a name alone (a concurrency cap's). The
// caller holds c.mu, for reading at least.
func (c *Collector) limitName(name string) string {
	if name == "" {
		return labelUnnamed
	}
	return c.limitLabel(core.Limit{Name: name})
}

// addCapSeries makes the acquisitions series of k and its cap's gauge,
// admitting the cap's name if there is still room, as addSeries does.
func (c *Collector) addCapSeries(k capKey) (prometheus.Counter, prometheus.Gauge) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k.limit != labelUnnamed && k.limit != labelOther {
		if _, ok := c.names[k.limit]; !ok {
			if len(c.names) >= c.maxNames {
				k.limit = labelOther
			} else {
				c.names[k.limit] = struct{}{}
			}
		}
	}
	ctr := c.capSeries[k]
	if ctr == nil {
		outcome := "refused"
		if k.acquired {
			outcome = "acquired"
		}
		ctr = c.acquires.WithLabelValues(validUTF8(k.limit), outcome, k.source.String())
		c.capSeries[k] = ctr
	}
	g := c.capGauges[k.limit]
	if g == nil {
		g = c.inFlight.WithLabelValues(validUTF8(k.limit))
		c.capGauges[k.limit] = g
	}
	return ctr, g
}

var _ core.Observer = (*Collector)(nil)
var _ core.ConcurrencyObserver = (*Collector)(nil)
var _ core.LeaseObserver = (*Collector)(nil)
var _ core.ThresholdObserver = (*Collector)(nil)
var _ prometheus.Collector = (*Collector)(nil)
