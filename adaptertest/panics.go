package adaptertest

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// RunPanics checks that an adapter's constructor panics on each programming
// mistake it must catch at setup: a nil limiter, a nil key function, an
// invalid limit, extra limit or concurrency cap, a negative wait, an
// unknown header style, a WithEnforce fraction outside [0, 1], a
// WithWarning threshold outside (0, 1], an invalid shadow limit, and a
// WithShare the core refuses (a weight of 0, reserves over 1) or of a
// level WithPath does not name. The panic message must begin with pkg and
// ": ", and for an invalid limit or cap the panic value must be an error
// wrapping [core.ErrInvalidLimit].
//
// mk builds the adapter's middleware for m on lim, as a [Build] does.
func RunPanics(t *testing.T, pkg string, mk func(lim *core.Limiter, m *Middleware)) {
	t.Helper()
	lim := Memory(t)
	ok := core.PerSecond(10)
	for _, tc := range []struct {
		name    string
		lim     *core.Limiter
		m       Middleware
		invalid bool // the panic wraps core.ErrInvalidLimit
	}{
		{name: "nil limiter", m: Middleware{Limit: ok, Key: keyfunc.IP()}},
		{name: "nil key", lim: lim, m: Middleware{Limit: ok}},
		{name: "zero limit", lim: lim, m: Middleware{Key: keyfunc.IP()}, invalid: true},
		{name: "invalid limit", lim: lim, m: Middleware{Limit: core.PerSecond(0), Key: keyfunc.IP()}, invalid: true},
		{name: "invalid extra limit", lim: lim, m: Middleware{Limit: ok, Key: keyfunc.IP(), Limits: []core.Limit{{Rate: 1}}}, invalid: true},
		{name: "invalid concurrency cap", lim: lim, m: Middleware{Limit: ok, Key: keyfunc.IP(), Concurrency: core.ConcurrencyLimit{Max: -1}}, invalid: true},
		{name: "negative wait", lim: lim, m: Middleware{Limit: ok, Key: keyfunc.IP(), Wait: -time.Second}},
		{name: "unknown header style", lim: lim, m: Middleware{Limit: ok, Key: keyfunc.IP(), Headers: policy.HeadersNone + 1}},
		{name: "enforce above 1", lim: lim, m: Middleware{Limit: ok, Key: keyfunc.IP(), Enforce: 1.5}},
		{name: "enforce NaN", lim: lim, m: Middleware{Limit: ok, Key: keyfunc.IP(), Enforce: math.NaN()}},
		{name: "warning above 1", lim: lim, m: Middleware{Limit: ok, Key: keyfunc.IP(), Warning: 1.5}},
		{name: "warning NaN", lim: lim, m: Middleware{Limit: ok, Key: keyfunc.IP(), Warning: math.NaN()}},
		{name: "share weight 0", lim: lim, m: shareMistake(core.Share{Fair: true, Weights: map[string]int{"a": 0}}, "up")},
		{name: "share reserves over 1", lim: lim, m: shareMistake(core.Share{Classes: []core.Class{{Name: "a", Reserve: 0.6}, {Name: "b", Reserve: 0.6}}}, "up")},
		{name: "share of an unknown level", lim: lim, m: shareMistake(core.Share{Fair: true}, "org")},
		{name: "invalid shadow limit", lim: lim, m: Middleware{Limit: ok, Key: keyfunc.IP(), Shadow: []core.Limit{ok, {Rate: 1}}}, invalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				v := recover()
				if v == nil {
					t.Fatalf("New(%s) did not panic", tc.name)
				}
				if msg := fmt.Sprint(v); !strings.HasPrefix(msg, pkg+": ") {
					t.Errorf("New(%s) panicked with %q, want a message beginning %q", tc.name, msg, pkg+": ")
				}
				if err, _ := v.(error); tc.invalid && !errors.Is(err, core.ErrInvalidLimit) {
					t.Errorf("New(%s) panicked with %#v, want an error wrapping core.ErrInvalidLimit", tc.name, v)
				}
			}()
			m := tc.m
			mk(tc.lim, &m)
		})
	}
}

// shareMistake is a middleware on a path "up" over "tenant" whose level
// named level is shared as s.
func shareMistake(s core.Share, level string) Middleware {
	return Middleware{
		Limit: core.PerSecond(10), Key: keyfunc.IP(), PathRoot: "up",
		Path:  []policy.PathLevel{{Name: "tenant", Key: keyfunc.Header("X-Tenant"), Limits: []core.Limit{core.PerSecond(5)}}},
		Share: &s, ShareLevel: level,
	}
}
