// Package sluiceprom exports a sluice limiter's decisions and store health as
// Prometheus metrics. It lives apart from core so that services which do not
// use Prometheus never import its client library.
//
//	obs := sluiceprom.New()
//	prometheus.MustRegister(obs)
//	lim, err := core.New(rdb, core.WithObserver(obs))
//
// One Collector may serve several limiters; their metrics add up.
//
// # Metrics
//
//	sluice_decisions_total{outcome, source, limit}   counter
//	    Every decision. outcome is "allowed", "denied" or "locked" (denied
//	    under a penalty lock); source is "store", "deny_cache",
//	    "fallback", "fail_open" or "fail_closed" (see core.Source); limit
//	    is the deciding limit's Name, or "<rate>/<period>" without one.
//	    fail_closed decisions carry outcome "denied" and limit "".
//	sluice_degraded_decisions_total                   counter
//	    Decisions made without the store (fallback, fail_open,
//	    fail_closed).
//	sluice_deny_cache_hits_total                      counter
//	    Denials answered by the local deny cache without a Redis call.
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
//	    by core.ErrorReason: timeout, refused, connection, loading,
//	    readonly, clusterdown, oom, script, other. Every reason of a node
//	    starts at 0 when the node is first seen.
//	sluice_store_latency_seconds{node, result}         histogram
//	    Store call latency; result is "ok" or "error".
package sluiceprom
