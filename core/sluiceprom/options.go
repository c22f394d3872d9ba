package sluiceprom

import (
	"maps"

	"github.com/prometheus/client_golang/prometheus"
)

// Option configures a Collector; see [New].
type Option func(*options)

type options struct {
	namespace   string
	constLabels prometheus.Labels
	registerer  prometheus.Registerer
	buckets     []float64
	maxNames    int
}

// defaultBuckets are the store latency buckets, in seconds: a healthy
// Redis answers in well under a millisecond, and the limiter's default
// budget is 50 ms.
var defaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}

// waitBuckets are the wait histogram's buckets, in seconds: from a
// millisecond, below which a wait is hardly felt, to a minute, beyond which
// a request is better denied than kept waiting.
var waitBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// defaultMaxNames is how many distinct limit names label decisions.
const defaultMaxNames = 100

// WithNamespace sets the prefix of every metric name: with "api",
// sluice_decisions_total becomes api_decisions_total. An empty namespace
// leaves the names unprefixed (decisions_total).
//
// Default: "sluice".
func WithNamespace(ns string) Option {
	return func(o *options) { o.namespace = ns }
}

// WithConstLabels adds labels with fixed values to every series of the
// Collector. Two Collectors may share one registry when they have the same
// constant label names with different values, for example
// {"limiter": "public"} and {"limiter": "internal"}. The names must not be
// those the Collector's metrics use (outcome, source, limit, dry_run, node,
// reason, result, le). The map is copied.
//
// Default: none.
func WithConstLabels(labels prometheus.Labels) Option {
	return func(o *options) { o.constLabels = maps.Clone(labels) }
}

// WithRegisterer sets where [New] registers the Collector. With nil, New
// registers it nowhere, and the caller registers it (for example with
// prometheus.WrapRegistererWith).
//
// Default: prometheus.DefaultRegisterer.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *options) { o.registerer = r }
}

// WithBuckets sets the upper bounds, in seconds, of the store latency
// histogram's buckets. They must increase strictly; an empty list restores
// the default. The list is copied. The wait histogram keeps its own
// buckets (see the package documentation).
//
// Default: 100 µs, 250 µs, 500 µs, 1, 2.5, 5, 10, 25, 50, 100, 250 ms and 1 s.
func WithBuckets(upper ...float64) Option {
	return func(o *options) { o.buckets = append([]float64(nil), upper...) }
}

// WithMaxLimitNames bounds the values of the limit label: the first n
// distinct limit names a Collector sees label their decisions, and the
// decisions of any later name are counted under "other". It must be at
// least 1. Unnamed limits never count against it (they share "unnamed").
//
// Default: 100.
func WithMaxLimitNames(n int) Option {
	return func(o *options) { o.maxNames = n }
}
