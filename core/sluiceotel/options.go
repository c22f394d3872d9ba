package sluiceotel

import (
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Option configures an Observer; see [New].
type Option func(*options)

type options struct {
	provider metric.MeterProvider
	attrs    []attribute.KeyValue
	maxNames int
}

// defaultMaxNames is how many distinct limit names an Observer records.
const defaultMaxNames = 100

// WithMeterProvider sets the meter provider the Observer's instruments come
// from. nil restores the default.
//
// Default: the global provider, otel.GetMeterProvider(), at the time of
// [New].
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.provider = mp }
}

// WithAttributes adds attributes to every measurement of the Observer, like
// constant labels: two Observers on one meter provider, for two limiters,
// are told apart by them (for example sluice.limiter="public" and
// sluice.limiter="internal"). Their keys must not be those the Observer
// sets itself. The list is copied; if the option is passed twice, the last
// list wins.
//
// Default: none.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(o *options) { o.attrs = slices.Clone(attrs) }
}

// WithMaxLimitNames bounds the values of the sluice.rate_limiting.policy
// attribute: the first n distinct limit names an Observer sees are
// recorded as they are, and the decisions of any later name as "other". It
// must be at least 1. Unnamed limits never count against it (they share
// "unnamed").
//
// Default: 100.
func WithMaxLimitNames(n int) Option {
	return func(o *options) { o.maxNames = n }
}
