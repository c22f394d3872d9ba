// Package sluiceprom exports a sluice limiter's decisions and store health as
// Prometheus metrics. It lives apart from core so that services which do not
// use Prometheus never import its client library.
//
//	obs, err := sluiceprom.New() // registered with prometheus.DefaultRegisterer
//	if err != nil {
//		return err
//	}
//	lim, err := core.New(rdb, core.WithObserver(obs))
//
// One Collector may serve several limiters; their metrics add up. To tell
// limiters apart, give each its own Collector with its own constant labels,
// on one registry:
//
//	public, err := sluiceprom.New(sluiceprom.WithRegisterer(reg),
//		sluiceprom.WithConstLabels(prometheus.Labels{"limiter": "public"}))
//	internal, err := sluiceprom.New(sluiceprom.WithRegisterer(reg),
//		sluiceprom.WithConstLabels(prometheus.Labels{"limiter": "internal"}))
//
// [WithNamespace] replaces the "sluice" prefix of the names and [WithBuckets]
// the store latency buckets.
//
// # Metrics
//
//	sluice_decisions_total{outcome, source, limit, dry_run}   counter
//	    Every decision. outcome is "allowed", "denied" or "locked" (denied
//	    under a penalty lock); source is "store", "deny_cache",
//	    "fallback", "fail_open", "fail_closed" or "deny_list" (a request
//	    on a middleware's deny list; see core.Source); dry_run
//	    is "true" for the decisions of a dry-run rule (core.Result.DryRun),
//	    which the middleware does not enforce, and "false" otherwise.
//	    fail_closed and deny_list decisions carry outcome "denied" and
//	    limit "".
//	    Decisions made without the store are those of the sources
//	    fallback, fail_open and fail_closed; deny-cache hits those of
//	    deny_cache.
//	sluice_shadow_decisions_total{outcome, source, limit, mode}   counter
//	    Every decision of a shadow limit (core.Rule.WithShadowLimits, a
//	    middleware's WithShadowLimits), one per shadow limit of each
//	    decision that decided them (core.Result.Shadow). outcome is the
//	    one it would have had, "allowed" or "denied": the would-be
//	    denials are outcome="denied". source is the decision's, as in
//	    sluice_decisions_total; limit is the shadow limit's, bounded
//	    with the same names; mode is "shadow". They are apart from
//	    sluice_decisions_total so that its sums stay the decisions
//	    made: a shadow limit enforces nothing.
//	sluice_wait_seconds{limit, dry_run}                histogram
//	    How long each admitted reservation (core.Limiter.Wait,
//	    core.Rule.Wait, a middleware's WithWait) waits for its tokens:
//	    core.Result.Wait, observed when the tokens are reserved. Only
//	    waits above zero are observed, so its count is the reservations
//	    that had to wait, not every admission. limit and dry_run are as
//	    in sluice_decisions_total. Buckets from 1 ms to 60 s: 1, 2.5, 5,
//	    10, 25, 50, 100, 250, 500 ms, 1, 2.5, 5, 10, 30 and 60 s
//	    (WithBuckets does not change them).
//	sluice_store_up{node}                              gauge
//	    Per store node: 1 while it answers, 0 while its circuit breaker is
//	    open (from the failure that opens it to the probe that closes it).
//	    node is a Cluster master's address, the server's address, or
//	    "sentinel", "ring", "cluster", "redis" (see core.StoreOutage).
//	    Alert on min(sluice_store_up) == 0: one dead master is enough.
//	sluice_store_outages_total{node}                   counter
//	    Outages begun: each is one switch of the node's keys to the
//	    failure policy.
//	sluice_store_outage_seconds_total{node}            counter
//	    Total length of the node's outages, including the time so far of
//	    one in progress (computed at each scrape).
//	sluice_store_errors_total{node, reason}            counter
//	    Store calls that failed (not counting calls the caller gave up),
//	    by core.StoreCall.Reason: timeout, refused, connection, loading,
//	    readonly, clusterdown, oom, script, auth, noperm, other, and
//	    paused (a timeout while this process was paused, charged to no
//	    node: a rising count means the pod is starved of CPU, not that
//	    Redis is slow). Every reason of a node starts at 0 when the node
//	    is first seen.
//	sluice_store_latency_seconds{node, result}         histogram
//	    Store call latency; result is "ok" or "error".
//
// # Cardinality
//
// The limit label is bounded whatever the traffic: it is the deciding
// limit's Name, "unnamed" for every limit without a Name, and "other" for
// the names a Collector sees after its first 100 distinct ones
// ([WithMaxLimitNames]). So name limits after plans or routes, never after
// tenants: a service that gives each of 1,000 tenants a limit of its own
// makes at most 101 limit values (100 names and "other"), not 1,000. A
// limit named "unnamed" or "other" shares that value. The Collector keeps
// one counter per series it has made, and one histogram per limit label
// and dry_run that waited, so its memory is bounded by the same numbers.
package sluiceprom
