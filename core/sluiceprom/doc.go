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
//	sluice_store_up                                    gauge
//	    1 while the store answers, 0 during an outage (from the first
//	    failure that opens the circuit breaker to the first success).
//	sluice_store_outages_total                         counter
//	    Outages begun: each is one switch to the failure policy.
//	sluice_store_outage_seconds_total                  counter
//	    Total length of the outages that have ended.
//	sluice_store_errors_total                          counter
//	    Store calls that failed (not counting calls the caller gave up).
//	sluice_store_latency_seconds{result}               histogram
//	    Store call latency; result is "ok" or "error".
package sluiceprom
