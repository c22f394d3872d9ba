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
// told to show, the top talkers of every limit the limiter counts (with
// [core.WithTopTalkers]), the threshold events a [Warnings] recorded, the
// limiter's fleet size and store health, the outages an [Outages]
// observer saw, and the overrides sets it was given. Make one with
// [ForLimiter].
//
// The limiter does not list the limits its middlewares use (each call
// names its own), so the page shows the ones [ShowLimits] names. Top
// talkers are the fleet's, read from the store; warnings are only those
// this replica raised (see [Warnings]). Without WithTopTalkers, TopTalkers
// returns [ErrNotEnabled], and without [ShowWarnings] so does Warnings.
//
// A LimiterSource is safe for concurrent use; it starts no goroutine and
// holds nothing to close. Its zero value is not usable.
type LimiterSource struct {
	lim     *core.Limiter
	limits  []Limit
	sets    []*overrides.Set
	outages *Outages
	warn    *Warnings
}

// SourceOption configures a [LimiterSource].
type SourceOption func(*sourceOptions) error

// sourceOptions is what the options of ForLimiter set.
type sourceOptions struct {
	limits  []Limit
	sets    []*overrides.Set
	outages *Outages
	warn    *Warnings
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

// ShowWarnings shows the threshold events w recorded (see
// [core.Rule.WithWarning]): give the limiter w's Record as its handler,
// core.WithThresholdHandler(w.Record), or call Record from a handler of
// your own. The page then shows the events this replica raised, not the
// fleet's: each event is raised once across the fleet, by the replica
// whose decision crossed, so a page shows a share of them (all of them
// with one replica). The fleet's count is the metric
// sluice_threshold_events_total{limit} (packages sluiceprom and
// sluiceotel).
//
// Default: warnings not enabled.
func ShowWarnings(w *Warnings) SourceOption {
	return func(s *sourceOptions) error {
		if w == nil {
			return errors.New("sluicepage: ShowWarnings: nil Warnings")
		}
		s.warn = w
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
	return &LimiterSource{lim: lim, limits: o.limits, sets: o.sets, outages: o.outages, warn: o.warn}, nil
}

// Limits returns the limits [ShowLimits] named.
func (s *LimiterSource) Limits(context.Context) ([]Limit, error) {
	out := make([]Limit, len(s.limits))
	for i, l := range s.limits {
		out[i] = Limit{Name: l.Name, Limits: slices.Clone(l.Limits)}
	}
	return out, nil
}

// TopTalkers reads the fleet's top talkers of each limit the limiter
// counts ([core.Limiter.TopLimits], in the order first decided) with
// [core.Limiter.Top]: up to the limiter's K keys by admitted cost and K by
// denials (at most 100), one store read per limit, bounded by ctx. A key
// is its [core.Talker.Label]: the key if the limiter keeps names, else
// "#" and its hash. A limiter that counts but has decided under no named
// limit yet has none. It returns [ErrNotEnabled] for a limiter without
// [core.WithTopTalkers], and the error of the first read that fails
// (naming its limit): the section shows it.
func (s *LimiterSource) TopTalkers(ctx context.Context) ([]Talkers, error) {
	names, k := s.lim.TopLimits()
	if k == 0 {
		return nil, ErrNotEnabled
	}
	k = min(k, maxRows)
	out := make([]Talkers, 0, len(names))
	for _, name := range names {
		t, err := s.lim.Top(ctx, name, k)
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("sluicepage: reading the top talkers of limit %q: %w", name, err)
		}
		if err != nil {
			return nil, err // it names the limit
		}
		out = append(out, talkersOf(t))
	}
	return out, nil
}

// talkersOf is the page's form of t.
func talkersOf(t core.Talkers) Talkers {
	return Talkers{
		Limit:         t.Limit,
		ByAdmitted:    talkerList(t.ByAdmitted),
		ByDenied:      talkerList(t.ByDenied),
		Admitted:      t.Admitted,
		Denied:        t.Denied,
		AdmittedError: t.AdmittedError,
		DeniedError:   t.DeniedError,
		Since:         t.Since,
	}
}

// talkerList is the page's form of ts.
func talkerList(ts []core.Talker) []Talker {
	out := make([]Talker, len(ts))
	for i, t := range ts {
		out[i] = Talker{Key: t.Label(), Admitted: t.Admitted, Denied: t.Denied}
	}
	return out
}

// Warnings returns the events the [Warnings] of [ShowWarnings] recorded
// whose window has not ended, latest first: those this replica raised. It
// returns [ErrNotEnabled] without ShowWarnings.
func (s *LimiterSource) Warnings(context.Context) ([]Warning, error) {
	if s.warn == nil {
		return nil, ErrNotEnabled
	}
	return s.warn.Recent(), nil
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
