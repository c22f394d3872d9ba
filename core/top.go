package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/internal/model"
)

// TopTalkers configures the top-talkers sketches of [WithTopTalkers].
// Zero fields take their defaults.
type TopTalkers struct {
	// K is how many keys per limit and per kind the metrics export
	// (package sluiceprom's and sluiceotel's top-talkers series): at
	// most K series per limit and kind. Default 10; 1 to 100.
	K int
	// Counters is the number of counters of each sketch, per limit, per
	// kind and per replica: the error of a count is at most the total
	// it counts divided by Counters (see [Talkers]). Default 8*K, at
	// least 64; from K to 4096. Each counter costs about 48 bytes, and 64
	// more with Names.
	Counters int
	// Names keeps the first 64 bytes of each counted key and shows them
	// in reads and metrics. Off by default: keys then appear as the hex
	// of their 64-bit hash (see [TopKeyHash]: the same in every process, so
	// `sluice top` and an operator can hash a key they suspect and find
	// it). Keys often name customers or addresses; turn Names on only
	// where the metrics may show them.
	Names bool
	// Window is the span counts are merged over in Redis: each replica
	// adds its counts to the window of the time it flushes, and a read
	// covers the current window and the one before. Default 1m; from
	// 10s to 24h. Readers (`sluice top -window`) must use the services'.
	Window time.Duration
	// Flush is how often each replica adds its sketch to the window and
	// starts a new one, in a goroutine of its own that [Limiter.Close]
	// stops after a last flush. Default 10s; from 100ms to Window.
	Flush time.Duration
}

// maxTopLimits bounds how many limit names a limiter keeps sketches for;
// limits named after the first maxTopLimits are not counted.
const maxTopLimits = 64

// WithTopTalkers keeps, for every named limit (the first 64 names this
// limiter decides under; limits without a Name are not counted), two
// fixed-size sketches of the heaviest keys: by admitted cost and by
// denials. Every decision of a key that returns a Result is counted: by the store,
// the deny cache, the local fallback or a token lease, dry runs included
// (a path's levels, see [PathRule], are not). An admission adds its cost
// to each named limit of its rule (a reservation its estimated cost, not
// what it settles to); a denial adds 1 to the limit that denied. Counting allocates nothing: the sketch is a Space-Saving sketch
// over 64-bit hashes of the keys, in memory fixed when the limit is first
// seen (see [TopTalkers.Counters]), under one mutex per limit.
//
// Every Flush each replica adds its sketch to Redis, off the request
// path: per limit, sorted sets of the current window (one script call per
// limit, pipelined per node, of kind [OpTop]), with a TTL of three
// windows. [Limiter.Top] reads the fleet's merged counts with their error
// bound; packages sluiceprom and sluiceotel export at most K series per
// limit from it, and `sluice top LIMIT` prints it.
func WithTopTalkers(t TopTalkers) Option {
	return func(o *options) { o.top, o.topOn = t, true }
}

// withDefaults returns t with its zero fields set, or an error naming a
// field out of range.
func (t TopTalkers) withDefaults() (TopTalkers, error) {
	if t.K == 0 {
		t.K = 10
	}
	if t.Counters == 0 {
		t.Counters = max(64, 8*t.K)
	}
	if t.Window == 0 {
		t.Window = time.Minute
	}
	if t.Flush == 0 {
		t.Flush = min(10*time.Second, t.Window)
	}
	switch {
	case t.K < 1 || t.K > 100:
		return t, fmt.Errorf("core: WithTopTalkers: K is %d, want 1 to 100", t.K)
	case t.Counters < t.K || t.Counters > 4096:
		return t, fmt.Errorf("core: WithTopTalkers: Counters is %d, want K (%d) to 4096", t.Counters, t.K)
	case t.Window < 10*time.Second || t.Window > 24*time.Hour || t.Window%time.Second != 0:
		return t, fmt.Errorf("core: WithTopTalkers: Window is %s, want whole seconds from 10s to 24h", t.Window)
	case t.Flush < 100*time.Millisecond || t.Flush > t.Window:
		return t, fmt.Errorf("core: WithTopTalkers: Flush is %s, want 100ms to Window (%s)", t.Flush, t.Window)
	}
	return t, nil
}

// topSketch is one limit's two sketches, under one mutex.
type topSketch struct {
	name string
	mu   sync.Mutex
	adm  *spaceSaving // admitted cost
	den  *spaceSaving // denials
}

// topRefs is a plan's sketches, one per limit; nil for a limit not
// counted (unnamed, or named past maxTopLimits).
type topRefs []*topSketch

// record counts a decision of key under the plan: its cost on each
// counted limit if admitted, else a denial on the limit that denied
// (index). It allocates nothing.
func (t topRefs) record(key string, allowed bool, cost int64, index int) {
	h := model.KeyHash(key)
	if !allowed {
		if index >= 0 && index < len(t) && t[index] != nil {
			s := t[index]
			s.mu.Lock()
			s.den.add(h, 1, key)
			s.mu.Unlock()
		}
		return
	}
	for _, s := range t {
		if s != nil {
			s.mu.Lock()
			s.adm.add(h, cost, key)
			s.mu.Unlock()
		}
	}
}

// topTalkers is a limiter's sketches, by limit name, and their flushes
// to the store.
type topTalkers struct {
	conf   TopTalkers
	store  store
	now    func() int64  // the limiter's clock, microseconds
	budget time.Duration // a last flush's, at Close
	failed atomic.Bool   // a flush failed: logged once
	log    func() *slog.Logger

	mu     sync.Mutex
	byName map[string]*topSketch
	order  []*topSketch // in the order first seen
}

// newTopTalkers returns the sketches of conf, validated.
func newTopTalkers(conf TopTalkers) (*topTalkers, error) {
	conf, err := conf.withDefaults()
	if err != nil {
		return nil, err
	}
	return &topTalkers{conf: conf, byName: map[string]*topSketch{}}, nil
}

// refs returns the sketches of limits, made on first use; nil if none is
// counted.
func (t *topTalkers) refs(limits []Limit) topRefs {
	var r topRefs
	for i, lim := range limits {
		if s := t.sketch(lim.Name); s != nil {
			if r == nil {
				r = make(topRefs, len(limits))
			}
			r[i] = s
		}
	}
	return r
}

// sketch returns the sketches of the limit called name, made on first
// use; nil for "" and for names past maxTopLimits.
func (t *topTalkers) sketch(name string) *topSketch {
	if name == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.byName[name]; ok {
		return s
	}
	if len(t.order) >= maxTopLimits {
		return nil
	}
	name = strings.Clone(name) // it may come from request memory (a fiber header)
	s := &topSketch{name: name, adm: newSpaceSaving(t.conf.Counters, t.conf.Names), den: newSpaceSaving(t.conf.Counters, t.conf.Names)}
	t.byName[name] = s
	t.order = append(t.order, s)
	return s
}

// sketches returns the sketches made so far, in the order first seen.
func (t *topTalkers) sketches() []*topSketch {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.order)
}

// window returns the start, in unix seconds, of the window holding at
// (microseconds).
func (t *topTalkers) window(at int64) int64 {
	w := int64(t.conf.Window / time.Second)
	s := at / 1_000_000
	return s - ((s%w)+w)%w
}

// run flushes every Flush until ctx ends, then once more within the
// limiter's budget (so that Close loses nothing counted).
func (t *topTalkers) run(ctx context.Context) {
	tick := time.NewTicker(t.conf.Flush)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.Background(), t.budget)
			t.flush(last)
			cancel()
			return
		case <-tick.C:
			fctx, cancel := context.WithTimeout(ctx, t.conf.Flush)
			t.flush(fctx)
			cancel()
		}
	}
}

// flush takes every sketch's counts, empties it, and adds the counts to
// the store's current window. Counts a failed flush held are lost (the
// failure is the store call's, reported to the observer as OpTop, and
// logged once).
func (t *topTalkers) flush(ctx context.Context) error {
	now := t.now()
	var fl []model.TopFlush
	for _, s := range t.sketches() {
		f := model.TopFlush{Limit: s.name, Window: t.window(now), TTL: 3 * t.conf.Window}
		s.mu.Lock()
		f.Admitted, f.Den = s.adm.take(), s.den.take()
		s.mu.Unlock()
		if f.Admitted.Total > 0 || f.Den.Total > 0 {
			fl = append(fl, f)
		}
	}
	if len(fl) == 0 {
		return nil
	}
	err := t.store.FlushTop(ctx, fl)
	if err != nil && t.failed.CompareAndSwap(false, true) {
		t.log().Warn("sluice: a flush of the top-talkers sketches to the store failed; their counts since the last flush are lost (logged once)", "error", err)
	}
	return err
}

// take returns the sketch's counts and empties it.
func (s *spaceSaving) take() model.TopCounts {
	c := model.TopCounts{Total: s.total, Bound: s.min()}
	if s.n > 0 {
		c.Hashes, c.Counts = slices.Clone(s.hash[:s.n]), slices.Clone(s.count[:s.n])
		if s.nameCap > 0 {
			c.Names = make([]string, s.n)
			for i := range s.n {
				c.Names[i] = s.name(i)
			}
		}
	}
	s.reset()
	return c
}

// pending returns the sketch's counts without emptying it.
func (s *spaceSaving) pending() model.TopCounts {
	c := model.TopCounts{Total: s.total, Bound: s.min(), Hashes: slices.Clone(s.hash[:s.n]), Counts: slices.Clone(s.count[:s.n])}
	if s.nameCap > 0 {
		c.Names = make([]string, s.n)
		for i := range s.n {
			c.Names[i] = s.name(i)
		}
	}
	return c
}

// Talker is one key among a limit's top talkers (see [Limiter.Top]).
type Talker struct {
	// Key is the key as decided (its first 64 bytes) when the limiter
	// keeps names ([TopTalkers.Names]); "" otherwise.
	Key string
	// Hash is the key's hash, as 16 hex digits: what names it when Key
	// is "" (see [TopKeyHash]).
	Hash string
	// Admitted is its admitted cost and Denied its denials, each within
	// the Talkers' AdmittedError and DeniedError of the truth. The count
	// of the kind it was not listed by is 0 when the key holds none of
	// that kind's counters: its true count is then at most that kind's
	// error (a key denied a lot often admits too little to be counted).
	Admitted, Denied int64
}

// Label returns the key if known, else "#" and its hash: what metrics and
// `sluice top` show.
func (t Talker) Label() string {
	if t.Key != "" {
		return t.Key
	}
	return "#" + t.Hash
}

// Talkers is what [Limiter.Top] reads of a limit: the heaviest keys by
// admitted cost and by denials, over the fleet, since Since.
type Talkers struct {
	Limit string
	// ByAdmitted holds the keys of largest admitted cost, largest first;
	// ByDenied those of most denials. At most k each; a key with a
	// count of zero is not listed.
	ByAdmitted, ByDenied []Talker
	// Admitted and Denied are the fleet's totals over the span read,
	// exact (of the flushes Redis kept).
	Admitted, Denied int64
	// AdmittedError and DeniedError bound the error of each count: the
	// true count of a listed key is within this of the one shown, and a
	// key not listed has a true count of at most the smallest listed one
	// plus this. Each is the sum over the flushes read of their sketch's
	// smallest counter, so at most the total divided by
	// TopTalkers.Counters (0: every count is exact).
	AdmittedError, DeniedError int64
	// Since is the start of the earliest window read: the counts cover
	// Since until now, less what replicas have not flushed yet (up to
	// one Flush), plus this limiter's own unflushed counts (less those of
	// a flush of its own under way as Top reads).
	Since time.Time
}

// TopKeyHash returns the hash under which the top-talkers sketches count
// key, as [Talker.Hash] shows it: 16 hex digits. An operator who suspects
// a key can find it among hashed talkers with it.
func TopKeyHash(key string) string {
	return fmt.Sprintf("%016x", model.KeyHash(key))
}

// Top returns the limit called limit's heaviest keys over the fleet (see
// [WithTopTalkers]): at most k by admitted cost and k by denials, from
// the windows in the store (the current one and the one before, as
// flushed by every replica) and this limiter's counts not yet flushed. It
// writes nothing. A limiter without WithTopTalkers reads with the default
// window, as the command-line tool does. Top returns an error for an
// empty limit name, k outside 1 to 1000, the caller's context error, and,
// wrapping [ErrUnavailable], when the store does not answer or holds a
// value of another type at a window's key (written by another program;
// the next window's keys are new).
func (l *Limiter) Top(ctx context.Context, limit string, k int) (Talkers, error) {
	switch {
	case limit == "":
		return Talkers{}, errors.New("core: Top: empty limit name; only named limits are counted")
	case k < 1 || k > 1000:
		return Talkers{}, fmt.Errorf("core: Top: k is %d, want 1 to 1000", k)
	}
	t := l.plans.top
	if t == nil {
		t = l.topReader()
	}
	now := l.now()
	cur := t.window(now)
	prev := cur - int64(t.conf.Window/time.Second)
	ws, err := l.store.ReadTop(ctx, limit, []int64{prev, cur})
	if err != nil {
		if ctx.Err() != nil {
			return Talkers{}, ctx.Err()
		}
		return Talkers{}, fmt.Errorf("%w: top talkers of limit %q: %w", ErrUnavailable, limit, err)
	}
	if s := t.lookup(limit); s != nil {
		s.mu.Lock()
		ws = append(ws, model.TopWindow{Admitted: s.adm.pending(), Den: s.den.pending()})
		s.mu.Unlock()
	}
	out := mergeTop(ws, k)
	out.Limit, out.Since = limit, time.Unix(prev, 0)
	return out, nil
}

// lookup returns the sketches of the limit called name, nil if none.
func (t *topTalkers) lookup(name string) *topSketch {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byName[name]
}

// TopLimits returns the names of the limits this limiter keeps top
// talkers of (see [WithTopTalkers]), in the order first decided, and K;
// nil and 0 without WithTopTalkers. Metrics packages export Top of each.
func (l *Limiter) TopLimits() ([]string, int) {
	t := l.plans.top
	if t == nil {
		return nil, 0
	}
	var names []string
	for _, s := range t.sketches() {
		names = append(names, s.name)
	}
	return names, t.conf.K
}

// topReader returns the defaults' reader, for a limiter without
// WithTopTalkers.
func (l *Limiter) topReader() *topTalkers {
	t, _ := newTopTalkers(TopTalkers{})
	return t
}

// mergeTop sums windows' counts per key and keeps the k heaviest of each
// kind.
func mergeTop(ws []model.TopWindow, k int) Talkers {
	var out Talkers
	adm, den := map[uint64]int64{}, map[uint64]int64{}
	names := map[uint64]string{}
	for _, w := range ws {
		out.Admitted += w.Admitted.Total
		out.Denied += w.Den.Total
		out.AdmittedError += w.Admitted.Bound
		out.DeniedError += w.Den.Bound
		sumCounts(adm, names, w.Admitted)
		sumCounts(den, names, w.Den)
	}
	out.ByAdmitted = heaviest(adm, den, names, k, false)
	out.ByDenied = heaviest(den, adm, names, k, true)
	return out
}

// sumCounts adds c's counts to m, and its names to names.
func sumCounts(m map[uint64]int64, names map[uint64]string, c model.TopCounts) {
	for i, h := range c.Hashes {
		m[h] += c.Counts[i]
		if i < len(c.Names) && c.Names[i] != "" {
			names[h] = c.Names[i]
		}
	}
}

// heaviest returns the k keys of largest count in by (other holding their
// count of the other kind), largest first, ties by hash.
func heaviest(by, other map[uint64]int64, names map[uint64]string, k int, denials bool) []Talker {
	hs := make([]uint64, 0, len(by))
	for h, n := range by {
		if n > 0 {
			hs = append(hs, h)
		}
	}
	slices.SortFunc(hs, func(a, b uint64) int {
		if by[a] != by[b] {
			if by[a] > by[b] {
				return -1
			}
			return 1
		}
		if a < b {
			return -1
		}
		return 1
	})
	hs = hs[:min(k, len(hs))]
	out := make([]Talker, len(hs))
	for i, h := range hs {
		out[i] = Talker{Key: names[h], Hash: fmt.Sprintf("%016x", h), Admitted: by[h], Denied: other[h]}
		if denials {
			out[i].Admitted, out[i].Denied = other[h], by[h]
		}
	}
	return out
}

// startTop starts the flushes of the top-talkers sketches, if any, as a
// background task of the limiter, which Close stops after a last flush.
func (l *Limiter) startTop() {
	t := l.plans.top
	if t == nil {
		return
	}
	t.store, t.log = l.store, l.log
	t.now = func() int64 { return l.now() }
	t.budget = max(l.timeout, 100*time.Millisecond)
	l.bg.Run(t.run)
}
