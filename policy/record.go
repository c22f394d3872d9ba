package policy

import (
	"slices"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/replay"
)

// Recorder is where a middleware records its decisions (see
// [WithRecord]): a *replay.Recorder, or any type with its two methods.
// Both are called on the request path and must not block.
type Recorder interface {
	// Sampled reports whether the requests of key (of a path, its
	// root's key) are recorded.
	Sampled(key string) bool
	// Record takes one event; it may keep its strings.
	Record(ev replay.Event)
}

// WithRecord records the middleware's decisions to rec, in the log
// format that `sluice simulate` replays (package core/replay): for each
// request of a sampled key, the instant of its decision
// ([core.Result.Time]: Redis's clock for a decision of the store), its
// key or path, its cost, whether it was admitted, and its status when the
// middleware knows it (429 for a denial; a response's own under
// [WithChargeIf] or [WithFinalCost], whose events are recorded when the
// response settles them; none otherwise). A decision made without the
// store (the local fallback) is recorded without its outcome, and one
// let through under core.FailOpen not at all: neither is the engine's
// decision to replay.
//
// rec samples by key, so a replay sees every request of the keys it
// sees; see replay.NewRecorder for the fraction, and for why recording
// never blocks nor fails a request. The middleware copies the strings it
// records. A nil rec records nothing.
//
// Default: none.
func WithRecord[C, H any](rec Recorder) Option[C, H] {
	return func(c *Config[C, H]) { c.rec = rec }
}

// record records a decision of cost n on key (or path, when not nil),
// whose settlement, if st is not nil, records it instead once its
// status is known.
func (p *Policy) record(key string, path []string, n int, res core.Result, st *settlement) {
	root := key
	if path != nil {
		root = path[0]
	}
	if res.Time.IsZero() || !p.rec.Sampled(root) { // fail-open: nothing was decided
		return
	}
	ev := replay.Event{Time: res.Time, Cost: n}
	switch {
	case res.Degraded:
	case res.Allowed:
		ev.Outcome = replay.Admitted
	default:
		ev.Outcome = replay.Denied
		if !res.DryRun && !p.dryRun {
			ev.Status = 429
		}
	}
	if path != nil {
		ev.Path = slices.Clone(path)
		for i := range ev.Path {
			ev.Path[i] = strings.Clone(ev.Path[i])
		}
	} else {
		ev.Key = strings.Clone(key)
	}
	if st != nil {
		st.rec, st.ev = p.rec, ev
		return
	}
	p.rec.Record(ev)
}
