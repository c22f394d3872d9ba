package sluiceotel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// ScopeName is the instrumentation scope (the meter's name) of every
// Observer's instruments.
const ScopeName = "github.com/sluicehq/sluice/core/sluiceotel"

// Attribute keys the Observer sets, besides the semantic conventions'
// db.system.name and error.type.
const (
	keyResult = attribute.Key("sluice.rate_limiting.result")
	keyPolicy = attribute.Key("sluice.rate_limiting.policy")
	keySource = attribute.Key("sluice.rate_limiting.source")
	keyDryRun = attribute.Key("sluice.rate_limiting.dry_run")
	keyMode   = attribute.Key("sluice.rate_limiting.mode")
	keyNode   = attribute.Key("sluice.store.node")
)

// Values of the policy attribute that are not limit names.
const (
	policyUnnamed = "unnamed" // a limit without a Name
	policyOther   = "other"   // a name beyond the Observer's bound
)

// latencyBounds are the explicit bucket boundaries advised for the store
// operation histogram, in seconds: a healthy Redis answers in well under a
// millisecond, and the limiter's default budget is 50 ms. A view may
// replace them.
var latencyBounds = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}

// waitBounds are the explicit bucket boundaries advised for the time
// waited histogram, in seconds: from a millisecond, below which a wait is
// hardly felt, to a minute, beyond which a request is better denied than
// kept waiting. A view may replace them.
var waitBounds = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

var results = [...]string{"allowed", "denied", "locked"}

// Observer is a core.Observer that records a limiter's decisions and store
// health on OpenTelemetry instruments. Make one with [New]; the zero value
// is not usable. It is safe for concurrent use; recording a decision on an
// attribute set seen before takes a read lock and does not allocate in
// this package (what the SDK allocates is its own).
type Observer struct {
	requests metric.Int64Counter
	waited   metric.Float64Histogram
	storeDur metric.Float64Histogram
	outages  metric.Int64Counter
	acquires metric.Int64Counter
	inFlight metric.Int64UpDownCounter
	leased   metric.Int64Counter
	inHand   metric.Int64UpDownCounter
	warned   metric.Int64Counter
	shadow   metric.Int64Counter
	up       metric.Int64ObservableGauge
	downTime metric.Float64ObservableCounter
	common   []attribute.KeyValue
	maxNames int

	mu        sync.RWMutex
	names     map[string]struct{}              // limit names admitted as policy values; at most maxNames
	series    map[seriesKey][]metric.AddOption // each holds one attribute set
	caps      map[seriesKey][]metric.AddOption // a cap's acquisitions (see capSeries)
	capFlight map[string][]metric.AddOption    // a cap's slots in flight, by policy value
	waits     map[waitKey][]metric.RecordOption
	shadows   map[seriesKey][]metric.AddOption // the shadow decisions' sets; dryRun is always false

	nodesMu sync.RWMutex
	nodes   map[string]*node
}

// seriesKey names one attribute set of the requests counter. policy is the
// attribute's value (see policy), never an unbounded string.
type seriesKey struct {
	result int8
	source core.Source
	dryRun bool
	policy string
}

// waitKey names one attribute set of the time waited histogram; policy is
// a value the requests counter already has (see addSeries).
type waitKey struct {
	dryRun bool
	policy string
}

// node holds one store node's attribute sets and outage state. They are
// kept as option slices, made once, so that passing them allocates nothing.
type node struct {
	calls   map[opResult][]metric.RecordOption // a call, by op and reason ("" for success); read-only once made
	outages []metric.AddOption                 // the node's outages
	health  []metric.ObserveOption             // the node's up and outage time

	mu        sync.Mutex
	ended     time.Duration // total length of the outages that have ended
	downSince time.Time     // start of the outage in progress; zero while up
}

// New returns an Observer whose instruments come from the global meter
// provider, or the one [WithMeterProvider] names. Pass it to
// core.WithObserver; one Observer may serve several limiters, whose
// measurements then add up.
//
// New fails if an option is invalid (an attribute key the Observer sets
// itself, a bound below 1) or the provider refuses an instrument or the
// callback that reports store health. The callback stays registered for
// the provider's lifetime.
func New(opts ...Option) (*Observer, error) {
	o := options{maxNames: defaultMaxNames}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxNames < 1 {
		return nil, errors.New("sluiceotel: WithMaxLimitNames: the bound must be at least 1")
	}
	for _, kv := range o.attrs {
		switch kv.Key {
		case keyResult, keyPolicy, keySource, keyDryRun, keyMode, keyNode, semconv.DBSystemNameKey, semconv.ErrorTypeKey:
			return nil, fmt.Errorf("sluiceotel: WithAttributes: %s is an attribute the observer sets itself", kv.Key)
		}
	}
	if o.provider == nil {
		o.provider = otel.GetMeterProvider()
	}
	m := o.provider.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	obs := &Observer{
		common:    o.attrs,
		maxNames:  o.maxNames,
		names:     make(map[string]struct{}),
		series:    make(map[seriesKey][]metric.AddOption),
		caps:      make(map[seriesKey][]metric.AddOption),
		capFlight: make(map[string][]metric.AddOption),
		waits:     make(map[waitKey][]metric.RecordOption),
		shadows:   make(map[seriesKey][]metric.AddOption),
		nodes:     make(map[string]*node),
	}
	var errs [12]error
	obs.requests, errs[0] = m.Int64Counter("sluice.rate_limiting.requests",
		metric.WithUnit("{request}"),
		metric.WithDescription("Rate-limit decisions, by result, policy (the limit's name), source and dry run."))
	obs.waited, errs[1] = m.Float64Histogram("sluice.rate_limiting.time_waited",
		metric.WithUnit("s"),
		metric.WithDescription("Time admitted reservations wait for their tokens, by policy and dry run; admissions that need not wait are not recorded."),
		metric.WithExplicitBucketBoundaries(waitBounds...))
	obs.storeDur, errs[2] = m.Float64Histogram("sluice.store.operation.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Duration of the limiter's store calls; a batched decision records its batch's."),
		metric.WithExplicitBucketBoundaries(latencyBounds...))
	obs.outages, errs[3] = m.Int64Counter("sluice.store.outages",
		metric.WithUnit("{outage}"),
		metric.WithDescription("Store outages begun: each opening of a node's circuit breaker."))
	obs.up, errs[4] = m.Int64ObservableGauge("sluice.store.up",
		metric.WithDescription("1 while the store node answers, 0 while its circuit breaker is open."))
	obs.downTime, errs[5] = m.Float64ObservableCounter("sluice.store.outage.time",
		metric.WithUnit("s"),
		metric.WithDescription("Total length of the store node's outages, including the one in progress."))
	obs.acquires, errs[6] = m.Int64Counter("sluice.concurrency.acquisitions",
		metric.WithUnit("{acquisition}"),
		metric.WithDescription("Concurrency-cap acquisitions, by result (acquired, refused), policy (the cap's name) and source."))
	obs.inFlight, errs[7] = m.Int64UpDownCounter("sluice.concurrency.in_flight",
		metric.WithUnit("{slot}"),
		metric.WithDescription("Concurrency-cap slots this process holds, by policy (the cap's name); the sum over replicas is the cap's use."))
	obs.leased, errs[8] = m.Int64Counter("sluice.lease.tokens",
		metric.WithUnit("{token}"),
		metric.WithDescription("Token leases of hot keys, by policy (the limit's name) and sluice.lease.kind: taken from Redis, spent locally, returned, lost."))
	obs.inHand, errs[9] = m.Int64UpDownCounter("sluice.lease.in_hand",
		metric.WithUnit("{token}"),
		metric.WithDescription("Tokens this process holds in token leases, by policy, as of each lease's last call."))
	obs.warned, errs[10] = m.Int64Counter("sluice.rate_limiting.threshold_events",
		metric.WithUnit("{event}"),
		metric.WithDescription("Keys that crossed a rule's warning threshold (core.Rule.WithWarning), by policy (the limit's name): once per key, limit and window across the fleet, counted by the replica that raised the event."))
	obs.shadow, errs[11] = m.Int64Counter("sluice.rate_limiting.shadow_requests",
		metric.WithUnit("{request}"),
		metric.WithDescription("Decisions of shadow limits, which enforce nothing, by the result they would have had (allowed, denied), policy (the shadow limit's name), source and mode (shadow)."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("sluiceotel: %w", err)
	}
	if _, err := m.RegisterCallback(obs.observeNodes, obs.up, obs.downTime); err != nil {
		return nil, fmt.Errorf("sluiceotel: %w", err)
	}
	return obs, nil
}

// attrs returns the attribute set of kvs and the Observer's own
// attributes, as a measurement option.
func (obs *Observer) attrs(kvs ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(append(kvs, obs.common...)...))
}

// ObserveDecision implements core.Observer.
func (obs *Observer) ObserveDecision(res core.Result, src core.Source) {
	if res.Shadow.Len() > 0 {
		obs.observeShadows(res.Shadow, src)
	}
	k := seriesKey{source: src, dryRun: res.DryRun}
	switch {
	case res.Allowed:
		k.result = 0
	case res.Locked:
		k.result = 2
	default:
		k.result = 1
	}
	waited := res.Allowed && res.Wait > 0
	var wopts []metric.RecordOption
	obs.mu.RLock()
	k.policy = obs.policy(res.LevelLimit(policyUnnamed))
	opts := obs.series[k]
	if waited {
		wopts = obs.waits[waitKey{dryRun: k.dryRun, policy: k.policy}]
	}
	obs.mu.RUnlock()
	if opts == nil {
		opts, k.policy = obs.addSeries(k)
	}
	obs.requests.Add(context.Background(), 1, opts...)
	if !waited {
		return
	}
	if wopts == nil {
		wopts = obs.addWait(waitKey{dryRun: k.dryRun, policy: k.policy})
	}
	obs.waited.Record(context.Background(), res.Wait.Seconds(), wopts...)
}

// policy returns l's policy value: "" for no limit (a fail_closed
// decision, recorded without the attribute), "unnamed" for a limit
// without a Name, the Name if it is one of the names admitted or may still
// be admitted, and "other" once maxNames names are. The caller holds
// obs.mu, for reading at least.
func (obs *Observer) policy(l core.Limit) string {
	switch {
	case l.Name != "":
		if _, ok := obs.names[l.Name]; ok || len(obs.names) < obs.maxNames {
			return l.Name
		}
		return policyOther
	case l == core.Limit{}:
		return ""
	}
	return policyUnnamed
}

// addSeries makes the attribute set of k, admitting its limit name if
// there is still room. It returns the set and the policy value it has:
// k's, or "other" if the name came too late.
func (obs *Observer) addSeries(k seriesKey) ([]metric.AddOption, string) {
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if opts := obs.series[k]; opts != nil {
		return opts, k.policy
	}
	// k.policy is a name that was not admitted when it was read.
	if k.policy = obs.admitName(k.policy); k.policy == policyOther {
		if opts := obs.series[k]; opts != nil {
			return opts, k.policy
		}
	}
	kvs := []attribute.KeyValue{
		keyResult.String(results[k.result]),
		keySource.String(k.source.String()),
		keyDryRun.Bool(k.dryRun),
	}
	if k.policy != "" {
		kvs = append(kvs, keyPolicy.String(validUTF8(k.policy)))
	}
	opts := []metric.AddOption{obs.attrs(kvs...)}
	obs.series[k] = opts
	return opts, k.policy
}

// admitName returns the policy value of policy, a value policy gave:
// policy itself, admitted as a name if it is one and there is still
// room, or "other" if there is none. The caller holds obs.mu for writing.
func (obs *Observer) admitName(policy string) string {
	if policy == "" || policy == policyUnnamed || policy == policyOther {
		return policy
	}
	if _, ok := obs.names[policy]; !ok {
		if len(obs.names) >= obs.maxNames {
			return policyOther
		}
		obs.names[policy] = struct{}{}
	}
	return policy
}

// observeShadows records the decision of each shadow limit of s, made by
// src, by the result it would have had.
func (obs *Observer) observeShadows(s core.Shadows, src core.Source) {
	for i := range s.Len() {
		k := seriesKey{source: src}
		if s.Denied(i) {
			k.result = 1
		}
		obs.mu.RLock()
		k.policy = obs.policy(s.Limit(i))
		opts := obs.shadows[k]
		obs.mu.RUnlock()
		if opts == nil {
			opts = obs.addShadow(k)
		}
		obs.shadow.Add(context.Background(), 1, opts...)
	}
}

// addShadow makes the shadow decisions' attribute set of k, as addSeries
// makes a decision's.
func (obs *Observer) addShadow(k seriesKey) []metric.AddOption {
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if opts := obs.shadows[k]; opts != nil {
		return opts
	}
	k.policy = obs.admitName(k.policy)
	if opts := obs.shadows[k]; opts != nil {
		return opts
	}
	opts := []metric.AddOption{obs.attrs(
		keyResult.String(results[k.result]),
		keySource.String(k.source.String()),
		keyPolicy.String(validUTF8(k.policy)),
		keyMode.String("shadow"),
	)}
	obs.shadows[k] = opts
	return opts
}

// addWait makes the time waited histogram's attribute set of k. k.policy
// is a value addSeries returned, so the names stay bounded.
func (obs *Observer) addWait(k waitKey) []metric.RecordOption {
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if opts := obs.waits[k]; opts != nil {
		return opts
	}
	kvs := []attribute.KeyValue{keyDryRun.Bool(k.dryRun)}
	if k.policy != "" {
		kvs = append(kvs, keyPolicy.String(validUTF8(k.policy)))
	}
	opts := []metric.RecordOption{obs.attrs(kvs...)}
	obs.waits[k] = opts
	return opts
}

// node returns the store node named name, making it the first time; a
// node starts up.
func (obs *Observer) node(name string) *node {
	obs.nodesMu.RLock()
	n := obs.nodes[name]
	obs.nodesMu.RUnlock()
	if n != nil {
		return n
	}
	obs.nodesMu.Lock()
	defer obs.nodesMu.Unlock()
	if n = obs.nodes[name]; n != nil {
		return n
	}
	nodeAttr := keyNode.String(validUTF8(name))
	all := obs.attrs(nodeAttr)
	n = &node{
		calls:   make(map[opResult][]metric.RecordOption, len(ops)*(len(reasons)+1)),
		outages: []metric.AddOption{all},
		health:  []metric.ObserveOption{all},
	}
	for _, op := range ops {
		opAttr := semconv.DBOperationNameKey.String(op)
		n.calls[opResult{op, ""}] = []metric.RecordOption{obs.attrs(semconv.DBSystemNameRedis, nodeAttr, opAttr)}
		for _, r := range reasons {
			n.calls[opResult{op, r}] = []metric.RecordOption{obs.attrs(semconv.DBSystemNameRedis, nodeAttr, opAttr, semconv.ErrorTypeKey.String(r))}
		}
	}
	obs.nodes[name] = n
	return n
}

// reasons are the values of error.type, from core.StoreCall.Reason.
var reasons = [...]string{core.ReasonTimeout, core.ReasonRefused, core.ReasonConnection, core.ReasonLoading,
	core.ReasonReadOnly, core.ReasonClusterDown, core.ReasonOOM, core.ReasonScript, core.ReasonAuth, core.ReasonNoPerm, core.ReasonOther, core.ReasonPaused}

// ops are the values of db.operation.name, from core's Op constants; a
// kind of call not listed is recorded as "other".
var ops = [...]string{core.OpDecide, core.OpPeek, core.OpSettle, core.OpAcquire, core.OpRelease,
	core.OpRenew, core.OpReset, core.OpLock, core.OpHeartbeat, core.OpLease, core.OpLeaseReturn, core.OpPath, core.OpOverrides, core.OpTop, core.OpThreshold, policyOther}

// opResult names one attribute set of the store duration histogram.
type opResult struct{ op, reason string }

// ObserveStore implements core.Observer.
func (obs *Observer) ObserveStore(call core.StoreCall) {
	n := obs.node(call.Node)
	k := opResult{op: call.Op, reason: call.Reason()}
	opts, ok := n.calls[k]
	if !ok {
		k.op = policyOther
		opts = n.calls[k]
	}
	obs.storeDur.Record(context.Background(), call.Latency.Seconds(), opts...)
}

// ObserveAcquire implements core.ConcurrencyObserver.
func (obs *Observer) ObserveAcquire(limit core.ConcurrencyLimit, acquired bool, src core.Source) {
	k := seriesKey{source: src, policy: limit.Name, result: 1}
	if acquired {
		k.result = 0
	}
	if k.policy == "" {
		k.policy = policyUnnamed
	}
	capOpts, flight := obs.capSeries(k)
	obs.acquires.Add(context.Background(), 1, capOpts...)
	if acquired {
		obs.inFlight.Add(context.Background(), 1, flight...)
	}
}

// ObserveTokenLease implements core.LeaseObserver. It runs once per lease
// call, not per decision.
func (obs *Observer) ObserveTokenLease(limit core.Limit, ev core.LeaseEvent) {
	obs.mu.RLock()
	policy := obs.policy(limit)
	obs.mu.RUnlock()
	if policy == "" {
		policy = policyUnnamed
	}
	ctx := context.Background()
	p := keyPolicy.String(validUTF8(policy))
	for _, k := range [...]struct {
		kind string
		n    int64
	}{{"taken", ev.Taken}, {"spent", ev.Spent}, {"returned", ev.Returned}, {"lost", ev.Lost}} {
		if k.n > 0 {
			obs.leased.Add(ctx, k.n, obs.attrs(p, attribute.String("sluice.lease.kind", k.kind)))
		}
	}
	if d := ev.Taken - ev.Spent - ev.Returned - ev.Lost; d != 0 {
		obs.inHand.Add(ctx, d, obs.attrs(p))
	}
}

// ObserveThreshold implements core.ThresholdObserver. It runs once per
// threshold event, not per decision; the key is not recorded.
func (obs *Observer) ObserveThreshold(limit core.Limit) {
	obs.mu.RLock()
	policy := obs.policy(limit)
	obs.mu.RUnlock()
	if policy == "" {
		policy = policyUnnamed
	}
	obs.warned.Add(context.Background(), 1, obs.attrs(keyPolicy.String(validUTF8(policy))))
}

// ObserveRelease implements core.ConcurrencyObserver.
func (obs *Observer) ObserveRelease(limit core.ConcurrencyLimit) {
	k := seriesKey{source: core.SourceStore, policy: limit.Name}
	if k.policy == "" {
		k.policy = policyUnnamed
	}
	_, flight := obs.capSeries(k)
	obs.inFlight.Add(context.Background(), -1, flight...)
}

// capSeries returns the attribute sets of a cap's acquisitions (k's
// result: 0 acquired, 1 refused) and of its slots in flight, admitting the
// cap's name as a policy value as addSeries admits a limit's.
func (obs *Observer) capSeries(k seriesKey) ([]metric.AddOption, []metric.AddOption) {
	obs.mu.RLock()
	if k.policy != policyUnnamed {
		k.policy = obs.policy(core.Limit{Name: k.policy})
	}
	c, f := obs.caps[k], obs.capFlight[k.policy]
	obs.mu.RUnlock()
	if c != nil && f != nil {
		return c, f
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if k.policy != policyUnnamed && k.policy != policyOther {
		if _, ok := obs.names[k.policy]; !ok {
			if len(obs.names) >= obs.maxNames {
				k.policy = policyOther
			} else {
				obs.names[k.policy] = struct{}{}
			}
		}
	}
	policy := keyPolicy.String(validUTF8(k.policy))
	if obs.caps[k] == nil {
		result := "refused"
		if k.result == 0 {
			result = "acquired"
		}
		obs.caps[k] = []metric.AddOption{obs.attrs(keyResult.String(result), policy, keySource.String(k.source.String()))}
	}
	if obs.capFlight[k.policy] == nil {
		obs.capFlight[k.policy] = []metric.AddOption{obs.attrs(policy)}
	}
	return obs.caps[k], obs.capFlight[k.policy]
}

// ObserveDegraded implements core.Observer.
func (obs *Observer) ObserveDegraded(o core.StoreOutage) {
	n := obs.node(o.Node)
	n.mu.Lock()
	n.downSince = o.Start
	n.mu.Unlock()
	obs.outages.Add(context.Background(), 1, n.outages...)
}

// ObserveRecovered implements core.Observer.
func (obs *Observer) ObserveRecovered(o core.StoreOutage) {
	n := obs.node(o.Node)
	n.mu.Lock()
	n.downSince = time.Time{}
	n.ended += o.Duration
	n.mu.Unlock()
}

// observeNodes reports each node's health at collection: up, and its
// outage time so far, the outage in progress included.
func (obs *Observer) observeNodes(_ context.Context, o metric.Observer) error {
	now := time.Now()
	obs.nodesMu.RLock()
	defer obs.nodesMu.RUnlock()
	for _, n := range obs.nodes {
		n.mu.Lock()
		total, up := n.ended, int64(1)
		if !n.downSince.IsZero() {
			total += now.Sub(n.downSince)
			up = 0
		}
		n.mu.Unlock()
		o.ObserveInt64(obs.up, up, n.health...)
		o.ObserveFloat64(obs.downTime, total.Seconds(), n.health...)
	}
	return nil
}

// validUTF8 makes s a valid attribute value for exporters that require
// UTF-8 (OTLP's protobuf strings).
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

var _ core.Observer = (*Observer)(nil)
var _ core.ConcurrencyObserver = (*Observer)(nil)
var _ core.LeaseObserver = (*Observer)(nil)
var _ core.ThresholdObserver = (*Observer)(nil)
