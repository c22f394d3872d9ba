package overrides

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/storeops"
	"github.com/sluicehq/sluice/keyfunc"
)

// Override is what an operator set for one key in a [Set]:
// limits that replace the key's own, or an allow or deny entry. Exactly one
// of Limits, Allow and Deny is set in an Override read from a set.
//
// Its text form (see [Parse] and [Override.String]) is "allow",
// "deny", or one limit or several separated by ";" as [core.ParseLimit] reads
// each: "600/m burst 600", "10/s; 1000/h".
type Override struct {
	// Limits replace the limits of the key's requests (one to eight).
	Limits []core.Limit
	// Allow lets the key's requests pass without a decision. The key of
	// an allow or deny entry may instead be an IP address or CIDR prefix,
	// which the middleware matches against the client address (see
	// [keyfunc.ParseListEntry]).
	Allow bool
	// Deny refuses every request of the key, or of the client addresses.
	Deny bool

	text string // the canonical text, when known
}

// Parse reads an override written as text: "allow", "deny"
// (case-insensitive), or one to eight limits separated by ";", each as
// [core.ParseLimit] reads it. An error for a limit wraps [core.ErrInvalidLimit].
func Parse(s string) (Override, error) {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "allow":
		return Override{Allow: true, text: "allow"}, nil
	case "deny":
		return Override{Deny: true, text: "deny"}, nil
	case "":
		return Override{}, fmt.Errorf("%w: empty override; want allow, deny or limits such as 600/m", core.ErrInvalidLimit)
	}
	var o Override
	for _, part := range splitLimits(t) {
		l, err := core.ParseLimit(part)
		if err != nil {
			return Override{}, err
		}
		o.Limits = append(o.Limits, l)
	}
	if err := o.validate(); err != nil {
		return Override{}, err
	}
	o.text = o.format()
	return o, nil
}

// splitLimits splits s at the semicolons outside Go-quoted names.
func splitLimits(s string) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			if q, err := strconv.QuotedPrefix(s[i:]); err == nil {
				i += len(q) - 1
			}
		case ';':
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// validate checks that exactly one of the fields is set and that the
// limits can be written as text and read back.
func (o Override) validate() error {
	n := 0
	if o.Allow {
		n++
	}
	if o.Deny {
		n++
	}
	if len(o.Limits) > 0 {
		n++
	}
	if n != 1 {
		return fmt.Errorf("%w: an override sets exactly one of Limits, Allow and Deny", core.ErrInvalidLimit)
	}
	if len(o.Limits) > core.MaxLimits {
		return fmt.Errorf("%w: %d limits in an override, at most %d", core.ErrInvalidLimit, len(o.Limits), core.MaxLimits)
	}
	for _, l := range o.Limits {
		if err := l.Validate(); err != nil {
			return err
		}
		if strings.ContainsRune(l.Name, ';') {
			return fmt.Errorf("%w: limit name %q contains ';', which separates an override's limits", core.ErrInvalidLimit, l.Name)
		}
	}
	return nil
}

// format returns the canonical text of a valid override.
func (o Override) format() string {
	switch {
	case o.Allow:
		return "allow"
	case o.Deny:
		return "deny"
	}
	var b strings.Builder
	for i, l := range o.Limits {
		if i > 0 {
			b.WriteString("; ")
		}
		t, _ := l.MarshalText() // valid: checked by validate
		b.Write(t)
	}
	return b.String()
}

// String returns the override's text form, as [Parse] reads it;
// "invalid override" for one that is not valid.
func (o Override) String() string {
	if o.text != "" {
		return o.text
	}
	if o.validate() != nil {
		return "invalid override"
	}
	return o.format()
}

// Set is a named set of per-key overrides (tenant plans changed at
// run time, allow and deny entries) shared by every replica through the
// limiter's Redis, made by [New].
//
// Each replica reads the set through a local copy: [Set.Lookup] never
// does I/O. One background goroutine asks Redis, every refresh interval
// (see [WithRefresh]), whether the set's version changed: one
// script call that returns only the version when nothing changed, and the
// whole set when something did. So a change made on any replica applies on
// every replica within the refresh interval plus one round trip, and
// decisions cost no extra round trip. While Redis is unavailable the last
// set read stays in force; the first failure and the recovery are logged,
// at most one of each per 10 seconds: the outages of a flapping Redis in
// between are counted in the next line.
//
// In Redis the set is a hash, <prefix>{ovr:<name>}, and a version counter,
// <prefix>{ovr:<name>}v, bumped by every change in the same script call,
// beside the set's epoch (<prefix>{ovr:<name>}e, new with each history of
// the set) and its last write's id (<prefix>{ovr:<name>}w), so that a
// version never comes back after Redis lost the set or its last writes;
// all have one hash tag, so they live in one Cluster slot, and none has an
// expiry, so no volatile-* eviction policy evicts them. A reload
// reads the whole hash in one script call (HGETALL), which for the largest
// sets (see [WithMax]) holds Redis for some milliseconds: the set
// is meant to change now and then, not per request.
//
// [Set.Set] and [Set.Remove] change the set in one call each
// within the limiter's time budget (see [core.WithTimeout]) and at least one
// second, since an operator's write is on no request's path and a busy
// client should not fail it, then read it back
// as [Set.Sync] does; a read, which may carry the whole set, is
// bounded as the poller's are, by the refresh interval and at least one
// second. Each budget runs from the call's send, and the caller's own
// context bounds the caller's wait. A Redis that restarts
// without persistence comes back with the set empty, and the replicas then
// read it so.
//
// For a limiter made by [core.NewMemory] the set lives in process memory: a
// change applies at once, in this process only, and nothing runs in the
// background.
//
// A Set is safe for concurrent use. [Set.Close] stops its
// goroutine; a closed set keeps answering Lookup with its last copy.
type Set struct {
	st      storeops.Store
	name    string
	refresh time.Duration
	max     int

	snap    atomic.Pointer[snapshot]
	loading chan struct{} // one slot: serializes loads and local changes; never taken on the request path
	failing atomic.Bool
	outage  pollLog     // the poller's alone (see report)
	cut     atomic.Bool // the set in Redis is larger than max: logged once per episode
	bad     atomic.Bool // a load skipped unreadable entries, logged once

	ctx     context.Context
	stop    context.CancelFunc
	done    chan struct{} // closed when the poller ends; nil without one
	stopped sync.Once
}

// pollLog is what the poller remembers of its outage lines.
type pollLog struct {
	said   bool      // the current outage was logged
	unsaid int       // outages begun since the last line, the current one included
	last   time.Time // when the last line was logged
}

type snapshot struct {
	version int64
	epoch   string // the epoch of the set's history in Redis and its last write's id, "<epoch>.<id>" (see overrides_load.lua); "" for none
	read    bool   // read from the store (or changed locally)
	m       map[string]Override
}

// Option configures a [Set].
type Option func(*options)

type options struct {
	refresh time.Duration
	max     int
}

// WithRefresh sets how often each replica asks Redis whether the
// set changed. A change applies on every replica within d plus one round
// trip. From 10ms to 1h.
//
// Default: 1s.
func WithRefresh(d time.Duration) Option {
	return func(o *options) { o.refresh = d }
}

// WithMax bounds the number of entries of the set. [Set.Set]
// refuses a new key when the set holds n entries already, and any change
// when it holds more (written by a replica with a higher bound), with an
// error that says how many it holds. A set found larger than n in Redis is
// not read at all, so that no replica pays for reading an oversized set:
// the last set read stays in force, [Set.Sync] returns an error that
// says how many entries it holds, and the poller logs it once. From 1 to
// 10,000,000.
//
// Default: 100000.
func WithMax(n int) Option {
	return func(o *options) { o.max = n }
}

// errEmptyKey is the error of a change to the empty key.
var errEmptyKey = errors.New("overrides: empty key")

// maxKey bounds the length of an overridden key.
const maxKey = 1024

// New returns the override set name of lim, and for a Redis-backed
// limiter starts the goroutine that keeps its local copy current, which
// [Set.Close] stops. It does no I/O itself: the goroutine reads the
// set at once, and until that read no override applies; call
// [Set.Sync] to wait for it.
//
// name is 1 to 64 bytes without braces; sets of one name under one key
// prefix (see [core.WithPrefix]) are one set, on every replica. New
// returns an error for a nil limiter, a bad name or a bad option.
func New(lim *core.Limiter, name string, opts ...Option) (*Set, error) {
	st := storeops.Of(lim)
	if st == nil {
		return nil, errors.New("overrides: New: nil Limiter")
	}
	if name == "" || len(name) > 64 || strings.ContainsAny(name, "{}") {
		return nil, fmt.Errorf("overrides: New: name %q: want 1 to 64 bytes without braces", name)
	}
	o := options{refresh: time.Second, max: 100_000}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("overrides: New: option %d is nil", i)
		}
		opt(&o)
	}
	if o.refresh < 10*time.Millisecond || o.refresh > time.Hour {
		return nil, fmt.Errorf("overrides: WithRefresh: %s, want 10ms to 1h", o.refresh)
	}
	if o.max < 1 || o.max > 10_000_000 {
		return nil, fmt.Errorf("overrides: WithMax: %d entries, want 1 to 10000000", o.max)
	}
	ov := &Set{st: st, name: name, refresh: o.refresh, max: o.max, loading: make(chan struct{}, 1)}
	ov.snap.Store(&snapshot{m: map[string]Override{}})
	ov.ctx, ov.stop = context.WithCancel(context.Background())
	if !st.Memory() {
		ov.done = make(chan struct{})
		go ov.run()
	}
	return ov, nil
}

// Name returns the set's name.
func (ov *Set) Name() string { return ov.name }

// Lookup returns the override of key in the local copy, and whether there
// is one. It does no I/O, takes no lock and does not allocate. The
// Override's Limits are shared: do not change them.
func (ov *Set) Lookup(key string) (Override, bool) {
	o, ok := ov.snap.Load().m[key]
	return o, ok
}

// Version returns the version of the local copy: the number of changes made
// to the set in Redis when it was read (0 before the first read and for an
// empty set never changed). It changes whenever the local copy does.
func (ov *Set) Version() int64 { return ov.snap.Load().version }

// Len returns the number of entries in the local copy.
func (ov *Set) Len() int { return len(ov.snap.Load().m) }

// Range calls f for each entry of the local copy, in no particular order,
// until f returns false. It sees one version of the set throughout.
func (ov *Set) Range(f func(key string, o Override) bool) {
	for k, o := range ov.snap.Load().m {
		if !f(k, o) {
			return
		}
	}
}

func checkKey(key string) error {
	if key == "" {
		return errEmptyKey
	}
	if len(key) > maxKey {
		return fmt.Errorf("overrides: override key is %d bytes, at most %d", len(key), maxKey)
	}
	return nil
}

// Set makes o the override of key, on every replica within the refresh
// interval, and on this one at once (it reads the set again after the
// change). It returns an error for an empty or too long key (over 1024
// bytes), an allow or deny entry that no request could match (a key that
// is written like an IP address or CIDR prefix but is not a valid one,
// such as "300.1.2.3" or "10.0.0.0/33": see [keyfunc.ParseListEntry]), an
// invalid override (wrapping [core.ErrInvalidLimit]), a full set (see
// [WithMax]), and, wrapping [core.ErrUnavailable], a store failure
// (such as no answer within the limiter's time budget, see [core.WithTimeout],
// or one second if that is longer): the
// change was then not made, unless the failure came from reading the set
// back (its text says "read"), when it was made but this replica learns it
// at its next refresh; after a timeout it may have been made
// ([Set.List] tells).
func (ov *Set) Set(ctx context.Context, key string, o Override) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	if o.Allow || o.Deny {
		// The entry syntax is the lists' (an address, a prefix or a
		// key), read by keyfunc so that this package parses no address.
		if _, _, err := keyfunc.ParseListEntry(key); err != nil {
			return fmt.Errorf("overrides: set %q: %w", ov.name, err)
		}
	}
	o.Limits = append([]core.Limit(nil), o.Limits...)
	o.text = o.format()
	if ov.st.Memory() {
		return ov.changeLocal(func(m map[string]Override) error {
			if _, ok := m[key]; !ok && len(m) >= ov.max {
				return ov.errFull(len(m))
			}
			m[key] = o
			return nil
		})
	}
	n, err := ov.change(ctx, func(ctx context.Context) (int64, error) {
		return ov.st.SetOverride(ctx, ov.name, key, o.text, ov.max)
	})
	if err != nil {
		return ov.storeErr(ctx, "set", err)
	}
	if n < 0 {
		return ov.errFull(int(-n - 1))
	}
	return ov.Sync(ctx)
}

// Remove removes key's override, on every replica within the refresh
// interval, and on this one at once. Removing a key without one is not an
// error. It returns an error for an empty key and, wrapping
// [core.ErrUnavailable], a store failure, such as no answer within the
// limiter's time budget (see [core.WithTimeout]) or one second if that is
// longer.
func (ov *Set) Remove(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if ov.st.Memory() {
		return ov.changeLocal(func(m map[string]Override) error {
			delete(m, key)
			return nil
		})
	}
	_, err := ov.change(ctx, func(ctx context.Context) (int64, error) {
		return ov.st.RemoveOverride(ctx, ov.name, key)
	})
	if err != nil {
		return ov.storeErr(ctx, "remove", err)
	}
	return ov.Sync(ctx)
}

// List reads the set from the store now, makes it the local copy, and
// returns a copy of its entries. For a [core.NewMemory] limiter it returns the
// local entries. Errors are those of [Set.Sync].
func (ov *Set) List(ctx context.Context) (map[string]Override, error) {
	if err := ov.Sync(ctx); err != nil {
		return nil, err
	}
	return maps.Clone(ov.snap.Load().m), nil
}

// Sync reads the set from the store now if its version changed, and makes
// it the local copy. It returns the caller's context error, a store
// failure wrapping [core.ErrUnavailable] (Redis did not answer within the
// refresh interval, at least one second), or an error for a set larger than
// [WithMax] in Redis, which is not read; the local copy is then
// unchanged. For a [core.NewMemory] limiter it does nothing.
func (ov *Set) Sync(ctx context.Context) error {
	if ov.st.Memory() {
		return nil
	}
	// One bound for the wait for a read in flight (the poller's) and for
	// this one.
	deadline := time.Now().Add(ov.pollTimeout())
	lctx, cancel := context.WithDeadline(ctx, deadline)
	err := ov.lock(lctx)
	cancel()
	if err != nil {
		if cerr := storeops.CallerGone(ctx); cerr != nil {
			return cerr
		}
		return ov.storeErr(ctx, "read", fmt.Errorf("overrides: a read in flight took the whole bound: %w", err))
	}
	defer ov.unlock()
	rctx, cancel := context.WithDeadline(ctx, deadline)
	err = ov.load(rctx)
	cancel()
	var big *oversizeError
	switch {
	case errors.As(err, &big):
		return err
	case err != nil:
		return ov.storeErr(ctx, "read", err)
	}
	return nil
}

// lock takes the right to load or change the local copy, waiting at most
// until ctx ends.
func (ov *Set) lock(ctx context.Context) error {
	select {
	case ov.loading <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (ov *Set) unlock() { <-ov.loading }

// Close stops the goroutine that keeps the local copy current, and waits
// for it to end. Lookup keeps answering from the last copy; Set, Remove and
// Sync still work. Close is safe to call more than once and always returns
// nil.
func (ov *Set) Close() error {
	ov.stopped.Do(func() {
		ov.stop()
		if ov.done != nil {
			<-ov.done
		}
	})
	return nil
}

// errFull is the error of a Set refused by a set that holds n entries.
func (ov *Set) errFull(n int) error {
	if n > ov.max {
		return fmt.Errorf("overrides: set %q holds %d entries, more than the %d WithMax allows; remove %d first", ov.name, n, ov.max, n-ov.max+1)
	}
	return fmt.Errorf("overrides: set %q holds %d entries, the most WithMax allows; remove one first", ov.name, n)
}

// oversizeError is the error of a read that found the set in the store
// larger than WithMax, and so did not read it.
type oversizeError struct {
	name   string
	n, max int64
}

func (e *oversizeError) Error() string {
	return fmt.Sprintf("overrides: set %q holds %d entries in Redis, more than the %d WithMax allows: not read; the last set read stays in force",
		e.name, e.n, e.max)
}

func (ov *Set) storeErr(ctx context.Context, op string, err error) error {
	if cerr := storeops.CallerGone(ctx); cerr != nil {
		return cerr
	}
	return fmt.Errorf("%w: overrides set %q: %s: %w", core.ErrUnavailable, ov.name, op, err)
}

// changeLocal applies change to a copy of the local set and installs it
// with the next version (for a NewMemory limiter).
func (ov *Set) changeLocal(change func(map[string]Override) error) error {
	_ = ov.lock(context.Background()) // cannot fail
	defer ov.unlock()
	cur := ov.snap.Load()
	m := maps.Clone(cur.m)
	if err := change(m); err != nil {
		return err
	}
	ov.snap.Store(&snapshot{version: cur.version + 1, read: true, m: m})
	return nil
}

// run polls the store every refresh interval until Close.
func (ov *Set) run() {
	defer close(ov.done)
	t := time.NewTicker(ov.refresh)
	defer t.Stop()
	for {
		ov.poll()
		select {
		case <-ov.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pollTimeout bounds one poll: the refresh interval, at least one second.
func (ov *Set) pollTimeout() time.Duration { return max(ov.refresh, time.Second) }

// change runs send, one change of the set (Set, Remove), within the
// limiter's budget and at least a second, as an operator's write waits on
// no request; without a budget (see WithTimeout) within the caller's
// deadline alone, which also stays when sooner.
func (ov *Set) change(ctx context.Context, send func(context.Context) (int64, error)) (int64, error) {
	if ov.st.Budget() > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(ov.st.Budget(), time.Second))
		defer cancel()
	}
	return send(ctx)
}

// poll reads the set if it changed, and logs the first failure and the
// recovery.
func (ov *Set) poll() {
	ctx, cancel := context.WithTimeout(ov.ctx, ov.pollTimeout())
	defer cancel()
	err := ov.lock(ctx)
	if err == nil {
		err = ov.load(ctx)
		ov.unlock()
	}
	if ov.ctx.Err() != nil {
		return // closed
	}
	var big *oversizeError
	if errors.As(err, &big) {
		if ov.cut.CompareAndSwap(false, true) {
			ov.st.Logger().Warn("sluice: the overrides in Redis hold more entries than WithMax; they are not read, and the last ones read stay in force (logged once)",
				"overrides", ov.name, "version", ov.Version(), "entries", big.n, "max", ov.max)
		}
		err = nil // Redis answered
	} else if err == nil {
		ov.cut.Store(false)
	}
	ov.report(time.Now(), err)
}

// overridesLogWindow rations the poller's outage lines: a failure that
// starts within it of the last line is counted, not logged, and logged
// once it has lasted that long; so a flapping Redis costs at most two
// lines (a failure, a recovery) per window, per set.
const overridesLogWindow = 10 * time.Second

// report logs the poll's outcome at now: the first failure of an outage
// and the recovery from a logged one, rationed by overridesLogWindow. Only
// the poller calls it.
func (ov *Set) report(now time.Time, err error) {
	lg := &ov.outage
	switch {
	case err != nil:
		if ov.failing.CompareAndSwap(false, true) {
			lg.said = false
			lg.unsaid++
		}
		if lg.said || (!lg.last.IsZero() && now.Sub(lg.last) < overridesLogWindow) {
			return
		}
		attrs := []any{"overrides", ov.name, "version", ov.Version(), "reason", core.ErrorReason(err), "error", err}
		if lg.unsaid > 1 {
			attrs = append(attrs, "outages_not_logged", lg.unsaid-1)
		}
		ov.st.Logger().Warn("sluice: cannot read the overrides from Redis; the last ones read stay in force", attrs...)
		lg.said, lg.unsaid, lg.last = true, 0, now
	case ov.failing.CompareAndSwap(true, false):
		if lg.said {
			ov.st.Logger().Info("sluice: the overrides are read from Redis again", "overrides", ov.name, "version", ov.Version())
			lg.last = now
		}
	}
}

// load reads the set if its version is not the local copy's, and installs
// it. The caller holds the lock (see Set.lock).
func (ov *Set) load(ctx context.Context) error {
	cur := ov.snap.Load()
	known := cur.epoch + ":" + strconv.FormatInt(cur.version, 10)
	if !cur.read {
		known = "" // never read: read even an untouched set
	}
	reply, err := ov.st.LoadOverrides(ctx, ov.name, known, ov.max)
	if err != nil {
		return err
	}
	if len(reply) == 0 {
		return fmt.Errorf("overrides: unexpected reply %v", reply)
	}
	token, _ := reply[0].(string)
	epoch, vs, _ := strings.Cut(token, ":")
	v, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return fmt.Errorf("overrides: version %q is not an epoch and an integer", token)
	}
	if len(reply) == 1 {
		return nil // unchanged
	}
	if n, ok := reply[1].(int64); ok {
		return &oversizeError{name: ov.name, n: n, max: int64(ov.max)}
	}
	fields, ok := reply[1].([]any)
	if !ok || len(fields)%2 != 0 {
		return fmt.Errorf("overrides: unexpected reply %T", reply[1])
	}
	m := make(map[string]Override, len(fields)/2)
	skipped := 0
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		t, _ := fields[i+1].(string)
		o, err := Parse(t)
		if err != nil || checkKey(k) != nil {
			skipped++
			continue
		}
		m[k] = o
	}
	if skipped > 0 && ov.bad.CompareAndSwap(false, true) {
		ov.st.Logger().Warn("sluice: the overrides in Redis hold entries that are not overrides; they are ignored (logged once)",
			"overrides", ov.name, "version", v, "ignored", skipped)
	}
	// The epoch part of a version is "<epoch>.<write id>" (see
	// overrides_load.lua): the write id changes with every write, the
	// epoch only with a new history.
	was, _, _ := strings.Cut(cur.epoch, ".")
	if now, _, _ := strings.Cut(epoch, "."); cur.read && was != "" && now != was {
		// The history this replica knew is gone: Redis restarted without
		// persistence, failed over to a replica that missed the writes,
		// or evicted the set. What Redis holds now is the set.
		ov.st.Logger().Warn("sluice: the overrides set this replica knew is gone from Redis (a restart without persistence, a failover that lost writes, or an eviction); the set Redis holds now applies",
			"overrides", ov.name, "entries_before", len(cur.m), "entries_now", len(m), "epoch_before", was, "epoch_now", now)
	}
	ov.snap.Store(&snapshot{version: v, epoch: epoch, read: true, m: m})
	return nil
}
