package sluiceotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Attribute keys of the top-talkers instruments (see [RegisterTop]),
// besides sluice.rate_limiting.policy, the limit's name.
const (
	keyTopKey  = attribute.Key("sluice.top.key")  // the key, or "#" and its hash
	keyTopKind = attribute.Key("sluice.top.kind") // admitted_cost or denials
)

// RegisterTop registers, on the global meter provider or the one
// [WithMeterProvider] names, observable gauges of lim's top talkers (see
// core.WithTopTalkers), read with core.Limiter.Top at each collection for
// every limit lim counts, within 1s each:
//
//   - sluice.top.admitted_cost: the admitted cost of each of the K keys of
//     largest admitted cost per limit (sluice.rate_limiting.policy) and
//     key (sluice.top.key);
//   - sluice.top.denials: the denials of each of the K keys most denied;
//   - sluice.top.total and sluice.top.error, per limit and sluice.top.kind
//     (admitted_cost, denials): the fleet's total, and the error bound of
//     every count.
//
// At most K (core.TopTalkers.K) keys per limit and kind are recorded. The
// key is the key itself only when the limiter keeps names
// (core.TopTalkers.Names), else "#" and its hash (core.TopKeyHash). The
// counts are the fleet's, so every replica records the same values. A
// limit whose read fails is left out of that collection. [WithAttributes]
// applies; WithMaxLimitNames does not. Unregister the returned
// registration to stop.
func RegisterTop(lim *core.Limiter, opts ...Option) (metric.Registration, error) {
	if lim == nil {
		return nil, errors.New("sluiceotel: RegisterTop: nil limiter")
	}
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	for _, kv := range o.attrs {
		switch kv.Key {
		case keyPolicy, keyTopKey, keyTopKind:
			return nil, fmt.Errorf("sluiceotel: WithAttributes: %s is an attribute RegisterTop sets itself", kv.Key)
		}
	}
	if o.provider == nil {
		o.provider = otel.GetMeterProvider()
	}
	m := o.provider.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	var errs [4]error
	var g [4]metric.Int64ObservableGauge
	g[0], errs[0] = m.Int64ObservableGauge("sluice.top.admitted_cost",
		metric.WithDescription("Admitted cost of the keys of largest admitted cost, per limit (at most K keys), over the fleet in the current top-talkers window and the one before."))
	g[1], errs[1] = m.Int64ObservableGauge("sluice.top.denials",
		metric.WithUnit("{request}"),
		metric.WithDescription("Denials of the most denied keys, per limit (at most K keys), over the fleet in the current top-talkers window and the one before."))
	g[2], errs[2] = m.Int64ObservableGauge("sluice.top.total",
		metric.WithDescription("Per limit and kind (admitted_cost, denials): the fleet's total over the windows the top talkers cover."))
	g[3], errs[3] = m.Int64ObservableGauge("sluice.top.error",
		metric.WithDescription("Per limit and kind (admitted_cost, denials): every top-talker count is within this of the truth."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("sluiceotel: %w", err)
	}
	common := o.attrs
	observe := func(_ context.Context, ob metric.Observer) error {
		names, k := lim.TopLimits()
		for _, name := range names {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			top, err := lim.Top(ctx, name, k)
			cancel()
			if err != nil {
				continue
			}
			policy := keyPolicy.String(validUTF8(name))
			set := func(kvs ...attribute.KeyValue) metric.ObserveOption {
				return metric.WithAttributeSet(attribute.NewSet(append(append(kvs, policy), common...)...))
			}
			for _, t := range top.ByAdmitted {
				ob.ObserveInt64(g[0], t.Admitted, set(keyTopKey.String(validUTF8(t.Label()))))
			}
			for _, t := range top.ByDenied {
				ob.ObserveInt64(g[1], t.Denied, set(keyTopKey.String(validUTF8(t.Label()))))
			}
			ob.ObserveInt64(g[2], top.Admitted, set(keyTopKind.String("admitted_cost")))
			ob.ObserveInt64(g[2], top.Denied, set(keyTopKind.String("denials")))
			ob.ObserveInt64(g[3], top.AdmittedError, set(keyTopKind.String("admitted_cost")))
			ob.ObserveInt64(g[3], top.DeniedError, set(keyTopKind.String("denials")))
		}
		return nil
	}
	reg, err := m.RegisterCallback(observe, g[0], g[1], g[2], g[3])
	if err != nil {
		return nil, fmt.Errorf("sluiceotel: %w", err)
	}
	return reg, nil
}
