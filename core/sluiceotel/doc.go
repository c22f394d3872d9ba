// Package sluiceotel records a sluice limiter's decisions and store health
// as OpenTelemetry metrics. It is a module of its own, so that services which
// do not use OpenTelemetry never import its API, and those that do get no
// Prometheus client from sluice.
//
//	obs, err := sluiceotel.New() // instruments from otel.GetMeterProvider()
//	if err != nil {
//		return err
//	}
//	lim, err := core.New(rdb, core.WithObserver(obs))
//
// [WithMeterProvider] names another provider. The program examples/otel in
// sluice's repository wires an Observer to the stdout exporter; an OTLP
// exporter (go.opentelemetry.io/otel/exporters/otlp/otlpmetric/...) is
// wired the same way, through an sdkmetric.PeriodicReader.
//
// # Instruments
//
// The instruments take the shape of the semantic conventions' rate-limiting
// metrics (ASP.NET Core's aspnetcore.rate_limiting.requests, with its result
// and policy attributes) and database client metrics, in a sluice
// namespace. Their meter is named [ScopeName].
//
//	sluice.rate_limiting.requests            counter, {request}
//	    Every decision. Attributes:
//	    sluice.rate_limiting.result   "allowed", "denied" or "locked"
//	                                  (denied under a penalty lock)
//	    sluice.rate_limiting.policy   the deciding limit's Name, "unnamed"
//	                                  or "other" (see Cardinality); absent
//	                                  for fail_closed decisions, which
//	                                  have no limit
//	    sluice.rate_limiting.source   "store", "deny_cache", "fallback",
//	                                  "fail_open", "fail_closed" or
//	                                  "deny_list" (see core.Source)
//	    sluice.rate_limiting.dry_run  true for the decisions of a dry-run
//	                                  rule (core.Result.DryRun), which the
//	                                  middleware does not enforce
//	sluice.rate_limiting.shadow_requests     counter, {request}
//	    Every decision of a shadow limit (core.Rule.WithShadowLimits, a
//	    middleware's WithShadowLimits): one per shadow limit of each
//	    decision that decided them (core.Result.Shadow), apart from
//	    sluice.rate_limiting.requests, as a shadow limit enforces
//	    nothing. Attributes: sluice.rate_limiting.result, the result it
//	    would have had ("allowed" or "denied": the would-be denials);
//	    sluice.rate_limiting.policy, the shadow limit's name, bounded as
//	    above; sluice.rate_limiting.source, the decision's; and
//	    sluice.rate_limiting.mode, "shadow".
//	sluice.rate_limiting.time_waited         histogram, s
//	    How long each admitted reservation (core.Limiter.Wait,
//	    core.Rule.Wait, the middleware's WithWait) waits for its tokens:
//	    core.Result.Wait, recorded when the tokens are reserved. Only
//	    waits above zero are recorded, so its count is the reservations
//	    that had to wait, not every admission. Attributes:
//	    sluice.rate_limiting.policy and sluice.rate_limiting.dry_run, as
//	    above. Advised bucket boundaries from 1 ms to 60 s: 1, 2.5, 5, 10,
//	    25, 50, 100, 250, 500 ms, 1, 2.5, 5, 10, 30 and 60 s.
//	sluice.store.operation.duration          histogram, s
//	    Each store call's I/O time. Attributes: db.system.name "redis";
//	    sluice.store.node, the node asked (a Cluster master's address,
//	    the server's address, or "sentinel", "ring", "cluster", "redis";
//	    see core.StoreOutage); error.type, only on failure, the class
//	    core.StoreCall.Reason gives (timeout, refused, connection,
//	    loading, readonly, clusterdown, oom, script, auth, noperm, other,
//	    and paused: a timeout while this process was paused, charged to
//	    no node). Failed calls are counted by this histogram's count with
//	    error.type set.
//	sluice.store.up                          gauge (asynchronous)
//	    Per sluice.store.node: 1 while it answers, 0 while its circuit
//	    breaker is open.
//	sluice.store.outages                     counter, {outage}
//	    Per sluice.store.node: outages begun.
//	sluice.store.outage.time                 counter (asynchronous), s
//	    Per sluice.store.node: total length of its outages, including the
//	    time so far of one in progress, read at each collection.
//
// The store histogram is not the conventions' db.client.operation.duration,
// though it has its attributes: a batched decision records its batch's
// time, where the conventions count a batch once; and a Redis client
// instrumentation that follows the conventions records every command,
// sluice's scripts included, under that name already. The node is
// sluice.store.node
// rather than server.address because it names a failure domain, which is
// not always one address.
//
// # Cardinality
//
// The policy attribute is bounded whatever the traffic: it is the deciding
// limit's Name, "unnamed" for every limit without a Name, and "other" for
// the names an Observer sees after its first 100 distinct ones
// ([WithMaxLimitNames]). So name limits after plans or routes, never after
// tenants. A limit named "unnamed" or "other" shares that value. The
// Observer keeps one attribute set per combination it has recorded (on
// each instrument), so its memory is bounded by the same numbers.
//
// # Several limiters
//
// One Observer may serve several limiters. To tell them apart, give each
// its own Observer with its own attributes ([WithAttributes]) on one meter
// provider; without distinct attributes, two Observers on one provider
// would report the same store nodes' health twice, and the later report
// would replace the earlier.
package sluiceotel
