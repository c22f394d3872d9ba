package sluicepage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sync"
	"time"
)

// Page is the handler that serves the page: the HTML at its path, and the
// data it polls at the same path with the query format=json. Make one with
// [New] and mount it as net/http/pprof is mounted, behind your own
// authentication:
//
//	mux.Handle("/debug/sluice", requireOperator(page))
//
// It answers GET and HEAD, and 405 to other methods; it checks no
// credentials and refuses no one, so it shows what it shows (limit names,
// keys, store errors) to whoever the handler you mount it behind lets
// through. It needs nothing from the network: its style and script are
// inline, and its Content-Security-Policy forbids loading anything else.
//
// A Page is safe for concurrent use; each request reads the [Source] on
// its own goroutines, which end before ServeHTTP returns. Its zero value
// is not usable.
type Page struct {
	src     Source
	refresh time.Duration
	timeout time.Duration
}

// Option configures a [Page].
type Option func(*options)

type options struct {
	refresh time.Duration
	timeout time.Duration
}

// WithRefresh sets how often an open page asks for new data. From 100ms to
// 1h.
//
// Default: 2s.
func WithRefresh(d time.Duration) Option { return func(o *options) { o.refresh = d } }

// WithTimeout bounds how long one refresh waits for the [Source]: a
// section not read within it shows its error. From 10ms to 1m.
//
// Default: 1s.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// New returns the page over src. It returns an error for a nil source or
// option, or an option out of its range.
func New(src Source, opts ...Option) (*Page, error) {
	if isNil(src) {
		return nil, errors.New("sluicepage: New: nil Source")
	}
	o := options{refresh: 2 * time.Second, timeout: time.Second}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("sluicepage: New: option %d of %d is nil", i, len(opts))
		}
		opt(&o)
	}
	if o.refresh < 100*time.Millisecond || o.refresh > time.Hour {
		return nil, fmt.Errorf("sluicepage: WithRefresh(%s): want 100ms to 1h", o.refresh)
	}
	if o.timeout < 10*time.Millisecond || o.timeout > time.Minute {
		return nil, fmt.Errorf("sluicepage: WithTimeout(%s): want 10ms to 1m", o.timeout)
	}
	return &Page{src: src, refresh: o.refresh, timeout: o.timeout}, nil
}

// ServeHTTP serves the page, or its data for the query format=json; to
// HEAD, the headers alone.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if r.URL.Query().Get("format") == "json" {
		h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
		h.Set("Content-Type", "application/json")
		if r.Method == http.MethodHead {
			return // the headers alone: the source is not read
		}
		ctx, cancel := context.WithTimeout(r.Context(), p.timeout)
		defer cancel()
		_ = json.NewEncoder(w).Encode(p.read(ctx)) // a client gone is no error of ours
		return
	}
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("Content-Type", "text/html; charset=utf-8")
	if r.Method != http.MethodHead {
		_, _ = io.WriteString(w, pageHTML)
	}
}

// Section states, as the JSON's "status" says them.
const (
	statusOK         = "ok"
	statusNotEnabled = "not_enabled"
	statusError      = "error"
)

// section is one section of the data: its status, its error in words, its
// data, and how many rows were left off.
type section[T any] struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	Data   T      `json:"data"`
	More   int    `json:"more,omitempty"`
}

// snapshot is what the page polls.
type snapshot struct {
	Time      time.Time              `json:"time"`
	RefreshMS int64                  `json:"refresh_ms"`
	Health    section[Health]        `json:"health"`
	Fleet     section[int]           `json:"fleet"`
	Limits    section[[]limitRow]    `json:"limits"`
	Top       section[[]Talkers]     `json:"top"`
	Warnings  section[[]Warning]     `json:"warnings"`
	Overrides section[[]OverrideSet] `json:"overrides"`
}

// limitRow is a Limit as the page shows it: each limit in its text form.
type limitRow struct {
	Name   string   `json:"name"`
	Limits []string `json:"limits"`
}

// read reads every section from the source at once, each on its own
// goroutine, and waits for them all.
func (p *Page) read(ctx context.Context) snapshot {
	s := snapshot{Time: time.Now().UTC(), RefreshMS: p.refresh.Milliseconds()}
	var wg sync.WaitGroup
	wg.Go(func() { s.Health = sectionOf(call(ctx, p.src.Health)) })
	wg.Go(func() { s.Fleet = sectionOf(call(ctx, p.src.FleetSize)) })
	wg.Go(func() { s.Limits = rows(toLimitRow)(call(ctx, p.src.Limits)) })
	wg.Go(func() { s.Top = rows(capTalkers)(call(ctx, p.src.TopTalkers)) })
	wg.Go(func() { s.Warnings = rows(same[Warning])(call(ctx, p.src.Warnings)) })
	wg.Go(func() { s.Overrides = rows(capSet)(call(ctx, p.src.Overrides)) })
	wg.Wait()
	if s.Health.Status == statusOK {
		s.Health.Data.Outages, s.Health.More = capped(s.Health.Data.Outages)
	}
	return s
}

// call calls read, turning a panic into an error: a source that panics on
// the page's goroutine must not take the process down.
func call[T any](ctx context.Context, read func(context.Context) (T, error)) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("sluicepage: the source panicked: %v", r)
		}
	}()
	return read(ctx)
}

// sectionOf makes a section of what a source returned.
func sectionOf[T any](v T, err error) section[T] {
	switch {
	case errors.Is(err, ErrNotEnabled):
		return section[T]{Status: statusNotEnabled}
	case err != nil:
		return section[T]{Status: statusError, Error: err.Error()}
	}
	return section[T]{Status: statusOK, Data: v}
}

// rows returns the function that makes a section of a list: up to
// maxRows rows, each made by conv.
func rows[T, R any](conv func(T) R) func([]T, error) section[[]R] {
	return func(v []T, err error) section[[]R] {
		if err != nil {
			return sectionOf[[]R](nil, err)
		}
		kept, more := capped(v)
		out := make([]R, len(kept))
		for i, x := range kept {
			out[i] = conv(x)
		}
		sec := sectionOf(out, nil)
		sec.More = more
		return sec
	}
}

// capped returns the first maxRows elements of v, and how many it left off.
func capped[T any](v []T) ([]T, int) {
	if len(v) <= maxRows {
		return v, 0
	}
	return v[:maxRows], len(v) - maxRows
}

func same[T any](v T) T { return v }

func toLimitRow(l Limit) limitRow {
	r := limitRow{Name: l.Name, Limits: make([]string, len(l.Limits))}
	for i, x := range l.Limits {
		if t, err := x.MarshalText(); err == nil {
			r.Limits[i] = string(t)
		} else {
			r.Limits[i] = x.String() + " (invalid)"
		}
	}
	return r
}

// capTalkers keeps the first maxRows keys of each list of t.
func capTalkers(t Talkers) Talkers {
	t.ByAdmitted, _ = capped(t.ByAdmitted)
	t.ByDenied, _ = capped(t.ByDenied)
	return t
}

// capSet keeps the first maxRows entries of o.
func capSet(o OverrideSet) OverrideSet {
	o.Entries, _ = capped(o.Entries)
	return o
}

// isNil reports whether v is nil or a nil pointer, map, func or slice in
// an interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Slice, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
