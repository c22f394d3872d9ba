package sluicepage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/overrides"
)

// maxRows bounds every table of the page, and the entries of a set of
// overrides a [LimiterSource] reads.
const maxRows = 100

// LimiterSource is the [Source] over a [core.Limiter]: the limits it was
// told to show, the limiter's fleet size and store health, the outages an
// [Outages] observer saw, and the overrides sets it was given. Make one
// with [ForLimiter].
//
// The limiter does not list the limits its middlewares use (each call
// names its own), so the page shows the ones [ShowLimits] names. It keeps
// no top talkers and raises no warnings yet: TopTalkers and Warnings
// return [ErrNotEnabled].
//
// A LimiterSource is safe for concurrent use; it starts no goroutine and
// holds nothing to close. Its zero value is not usable.
type LimiterSource struct {
	lim     *core.Limiter
	limits  []Limit
	sets    []*overrides.Set
	outages *Outages
}

// SourceOption configures a [LimiterSource].
type SourceOption func(*sourceOptions) error

// sourceOptions is what the options of ForLimiter set.
type sourceOptions struct {
	limits  []Limit
	sets    []*overrides.Set
	outages *Outages
}

// ShowLimits adds a row to the page's list of limits: name, and the
// limits checked together on each key, as given to the middleware or to
// [core.Limiter.Prepare] (a rule's are [core.Rule.Limits]). Rows are shown
// in the order given. [ForLimiter] returns an error for an empty or
// repeated name, no limits, or an invalid one.
//
// Default: no limits listed.
func ShowLimits(name string, limits ...core.Limit) SourceOption {
	return func(s *sourceOptions) error {
		switch {
		case strings.TrimSpace(name) == "":
			return errors.New("sluicepage: ShowLimits: empty name")
		case len(limits) == 0:
			return fmt.Errorf("sluicepage: ShowLimits(%q): no limits given", name)
		case slices.ContainsFunc(s.limits, func(l Limit) bool { return l.Name == name }):
			return fmt.Errorf("sluicepage: ShowLimits(%q): name given twice", name)
		}
		for _, l := range limits {
			if err := l.Validate(); err != nil {
				return fmt.Errorf("sluicepage: ShowLimits(%q): %w", name, err)
			}
		}
		s.limits = append(s.limits, Limit{Name: name, Limits: slices.Clone(limits)})
		return nil
	}
}

// ShowOverrides shows the entries of sets, read from each set's local
// copy (no I/O): its version, its size and up to 100 entries, sorted by
// key. [ForLimiter] returns an error for a nil set or two sets of one
// name.
//
// Default: no overrides shown.
func ShowOverrides(sets ...*overrides.Set) SourceOption {
	return func(s *sourceOptions) error {
		for _, set := range sets {
			if set == nil {
				return errors.New("sluicepage: ShowOverrides: nil set")
			}
			if slices.ContainsFunc(s.sets, func(o *overrides.Set) bool { return o.Name() == set.Name() }) {
				return fmt.Errorf("sluicepage: ShowOverrides: set %q given twice", set.Name())
			}
			s.sets = append(s.sets, set)
		}
		return nil
	}
}

// ShowOutages shows the open outages o saw: give the limiter o as its
// observer ([core.WithObserver]), or tell it of outages from an observer
// of your own.
//
// Default: none shown; the store's health is what [core.Limiter.Ready]
// says.
func ShowOutages(o *Outages) SourceOption {
	return func(s *sourceOptions) error {
		if o == nil {
			return errors.New("sluicepage: ShowOutages: nil Outages")
		}
		s.outages = o
		return nil
	}
}

// ForLimiter returns the [Source] over lim, configured by opts. It returns
// an error for a nil limiter or option, or for what an option refuses.
func ForLimiter(lim *core.Limiter, opts ...SourceOption) (*LimiterSource, error) {
	if lim == nil {
		return nil, errors.New("sluicepage: ForLimiter: nil limiter")
	}
	var o sourceOptions
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("sluicepage: ForLimiter: option %d of %d is nil", i, len(opts))
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	return &LimiterSource{lim: lim, limits: o.limits, sets: o.sets, outages: o.outages}, nil
}

// Limits returns the limits [ShowLimits] named.
func (s *LimiterSource) Limits(context.Context) ([]Limit, error) {
	out := make([]Limit, len(s.limits))
	for i, l := range s.limits {
		out[i] = Limit{Name: l.Name, Limits: slices.Clone(l.Limits)}
	}
	return out, nil
}

// TopTalkers returns [ErrNotEnabled]: the limiter keeps no top talkers.
func (s *LimiterSource) TopTalkers(context.Context) ([]Talkers, error) {
	return nil, ErrNotEnabled
}

// Warnings returns [ErrNotEnabled]: the limiter raises no threshold
// warnings.
func (s *LimiterSource) Warnings(context.Context) ([]Warning, error) {
	return nil, ErrNotEnabled
}

// Health asks the store whether it is ready ([core.Limiter.Ready], a few
// round trips per node, bounded by ctx) and adds the open outages
// [ShowOutages] gave and [core.Limiter.ReplicaAckMisses]. A store that is
// not ready is a Health with Ready false and the cause, not an error.
func (s *LimiterSource) Health(ctx context.Context) (Health, error) {
	h := Health{Ready: true, AckMisses: s.lim.ReplicaAckMisses()}
	if err := s.lim.Ready(ctx); err != nil {
		h.Ready, h.Cause = false, err.Error()
	}
	if s.outages != nil {
		h.Outages = s.outages.Open()
	}
	return h, nil
}

// FleetSize returns [core.Limiter.FleetSize].
func (s *LimiterSource) FleetSize(context.Context) (int, error) {
	return s.lim.FleetSize(), nil
}

// Overrides returns the sets [ShowOverrides] gave, each with up to 100
// entries of its local copy, sorted by key.
func (s *LimiterSource) Overrides(context.Context) ([]OverrideSet, error) {
	out := make([]OverrideSet, 0, len(s.sets))
	for _, set := range s.sets {
		out = append(out, readSet(set))
	}
	return out, nil
}

// readSet reads the local copy of set with up to maxRows entries. The
// entries are of one version; the version is read just after them, so a
// change in between shows with the next refresh.
func readSet(set *overrides.Set) OverrideSet {
	all := map[string]overrides.Override{}
	set.Range(func(k string, o overrides.Override) bool {
		all[k] = o
		return true
	})
	keys := slices.Sorted(maps.Keys(all))
	out := OverrideSet{Name: set.Name(), Version: set.Version(), Len: len(keys)}
	for _, k := range keys[:min(len(keys), maxRows)] {
		out.Entries = append(out.Entries, Override{Key: k, Value: all[k].String()})
	}
	return out
}

// Outages is a [core.Observer] that remembers which store nodes are
// judged unavailable now (their breaker open), for the page to show (see
// [ShowOutages]). It ignores decisions and store calls. Give it to the
// limiter with [core.WithObserver], or call its ObserveDegraded and
// ObserveRecovered from an observer of your own. Its zero value is ready
// to use; it is safe for concurrent use.
type Outages struct {
	mu   sync.Mutex
	open map[string]Outage
}

// ObserveDecision does nothing.
func (o *Outages) ObserveDecision(core.Result, core.Source) {}

// ObserveStore does nothing.
func (o *Outages) ObserveStore(core.StoreCall) {}

// ObserveDegraded records that g's node is unavailable.
func (o *Outages) ObserveDegraded(g core.StoreOutage) {
	out := Outage{Node: g.Node, Since: g.Start}
	if g.Err != nil {
		out.Err = g.Err.Error()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.open == nil {
		o.open = map[string]Outage{}
	}
	o.open[g.Node] = out
}

// ObserveRecovered records that g's node is available again.
func (o *Outages) ObserveRecovered(g core.StoreOutage) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.open, g.Node)
}

// Open returns the outages open now, sorted by node.
func (o *Outages) Open() []Outage {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Outage, 0, len(o.open))
	for _, g := range o.open {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b Outage) int { return strings.Compare(a.Node, b.Node) })
	return out
}
