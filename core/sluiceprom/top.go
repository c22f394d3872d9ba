package sluiceprom

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/core"
)

// TopCollector is a prometheus.Collector that exports a limiter's top
// talkers (see core.WithTopTalkers): at each scrape it reads
// core.Limiter.Top of every limit the limiter counts, and exports at most
// K series per limit for each kind (K of core.TopTalkers):
//
//   - sluice_top_admitted_cost{limit,key}: the admitted cost of each of
//     the K keys of largest admitted cost;
//   - sluice_top_denials{limit,key}: the denials of each of the K keys
//     most denied;
//   - sluice_top_total{limit,kind} and sluice_top_error{limit,kind}
//     (kind admitted_cost or denials): the fleet's total and the error
//     bound of every count.
//
// The key label is the key when the limiter keeps names
// (core.TopTalkers.Names), else "#" and its hash (core.TopKeyHash). The
// counts cover the current window and the one before, over every replica
// (see core.Talkers), so every replica's collector exports the same
// values: sum them in queries with max, not sum. A limit whose read fails
// is left out of that scrape. Make one with [NewTop].
type TopCollector struct {
	lim                      *core.Limiter
	timeout                  time.Duration
	admitted, denials, total *prometheus.Desc
	bound                    *prometheus.Desc
}

// NewTop returns a TopCollector of lim, registered as [New] registers a
// Collector: with prometheus.DefaultRegisterer unless [WithRegisterer]
// says otherwise. [WithNamespace] and [WithConstLabels] apply; the other
// options do not. A scrape reads each limit within the limiter's own
// store budget, at most 1s.
func NewTop(lim *core.Limiter, opts ...Option) (*TopCollector, error) {
	if lim == nil {
		return nil, errors.New("sluiceprom: NewTop: nil limiter")
	}
	o := options{namespace: "sluice", registerer: prometheus.DefaultRegisterer, maxNames: defaultMaxNames}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("sluiceprom: %w", err)
	}
	for name := range o.constLabels {
		if name == "key" || name == "kind" {
			return nil, fmt.Errorf("sluiceprom: constant label %q is one of the top collector's own labels", name)
		}
	}
	name := func(n string) string { return prometheus.BuildFQName(o.namespace, "", n) }
	c := &TopCollector{
		lim:     lim,
		timeout: time.Second,
		admitted: prometheus.NewDesc(name("top_admitted_cost"),
			"Admitted cost of the keys of largest admitted cost, per limit (at most K keys), over the fleet in the current top-talkers window and the one before.",
			[]string{"limit", "key"}, o.constLabels),
		denials: prometheus.NewDesc(name("top_denials"),
			"Denials of the most denied keys, per limit (at most K keys), over the fleet in the current top-talkers window and the one before.",
			[]string{"limit", "key"}, o.constLabels),
		total: prometheus.NewDesc(name("top_total"),
			"Per limit and kind (admitted_cost, denials): the fleet's total over the windows the top talkers cover.",
			[]string{"limit", "kind"}, o.constLabels),
		bound: prometheus.NewDesc(name("top_error"),
			"Per limit and kind (admitted_cost, denials): every top-talker count is within this of the truth.",
			[]string{"limit", "kind"}, o.constLabels),
	}
	if err := prometheus.NewPedanticRegistry().Register(c); err != nil {
		return nil, fmt.Errorf("sluiceprom: %w", err)
	}
	if o.registerer != nil {
		if err := o.registerer.Register(c); err != nil {
			return nil, fmt.Errorf("sluiceprom: registering the top collector: %w", err)
		}
	}
	return c, nil
}

// Describe implements prometheus.Collector.
func (c *TopCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.admitted
	ch <- c.denials
	ch <- c.total
	ch <- c.bound
}

// Collect implements prometheus.Collector.
func (c *TopCollector) Collect(ch chan<- prometheus.Metric) {
	names, k := c.lim.TopLimits()
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		top, err := c.lim.Top(ctx, name, k)
		cancel()
		if err != nil {
			continue
		}
		limit := validUTF8(name)
		for _, t := range top.ByAdmitted {
			ch <- prometheus.MustNewConstMetric(c.admitted, prometheus.GaugeValue, float64(t.Admitted), limit, validUTF8(t.Label()))
		}
		for _, t := range top.ByDenied {
			ch <- prometheus.MustNewConstMetric(c.denials, prometheus.GaugeValue, float64(t.Denied), limit, validUTF8(t.Label()))
		}
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(top.Admitted), limit, "admitted_cost")
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(top.Denied), limit, "denials")
		ch <- prometheus.MustNewConstMetric(c.bound, prometheus.GaugeValue, float64(top.AdmittedError), limit, "admitted_cost")
		ch <- prometheus.MustNewConstMetric(c.bound, prometheus.GaugeValue, float64(top.DeniedError), limit, "denials")
	}
}
