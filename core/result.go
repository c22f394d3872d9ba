package core

import "time"

// Result is the outcome of one decision. Denial is a normal outcome: a denied
// request comes back with Allowed false and a nil error.
type Result struct {
	// Allowed reports whether the request was admitted.
	Allowed bool
	// Remaining is how many more unit requests Limit, the limit that
	// decided, would admit right now, after this decision.
	Remaining int
	// RetryAfter is, for a denied request, how long until the same request
	// could be admitted (or until the penalty lock ends, if that is later).
	// Zero when allowed.
	RetryAfter time.Duration
	// Wait is, for an admitted reservation ([Limiter.Wait], [Rule.Wait], a
	// middleware's WithWait), how long the request waits for its tokens
	// before it may proceed. Zero for an immediate admission and for a
	// denial.
	Wait time.Duration
	// ResetAfter is how long until the bucket of Limit, the limit that
	// decided, is full again. With several limits, the others' buckets
	// may take longer (10/s and 1000/h: the per-second bucket is full
	// again 0.1 s after one request, the hourly one after 3.6 s).
	ResetAfter time.Duration
	// Limit is the limit that decided: the one that denied (with the
	// longest wait, if several did), or else the one with the fewest tokens
	// left. Remaining, ResetAfter and the headers describe this limit.
	Limit Limit
	// Locked reports that the key is under a penalty lock (see
	// [WithPenalty]), including the denial that set it.
	Locked bool
	// Degraded reports that the decision was made locally because the store
	// was unavailable (see [FailurePolicy]).
	Degraded bool
	// DryRun marks a decision of a dry-run rule ([Rule.DryRun]), or of a
	// key a canary leaves in dry run ([Rule.WithEnforce]): Allowed says
	// what would have happened; the caller lets the request through.
	DryRun bool
	// Warning marks an admission of a key that has used at least the
	// rule's warning threshold of Limit (see [Rule.WithWarning]): close
	// to the limit, not yet denied. False without a threshold.
	Warning bool
	// Shadow reports, for a rule with shadow limits
	// ([Rule.WithShadowLimits]), which of them would have denied the
	// request; they change nothing of Allowed or the rest. Its Len is 0
	// for a rule without, and for a decision that did not decide them
	// (under [FailOpen] while the store is unavailable).
	Shadow Shadows
	// Level is, for a decision of a path of keys ([PathRule]), the name
	// of the level that decided, as the rule gives it (never request
	// data); Limit is then one of that level's limits. Empty for a
	// decision of one key.
	Level string
	// Time is the instant the decision was made at, on the clock that
	// made it: Redis's (the TIME its script read) for a decision of the
	// store, this limiter's own for one of its deny cache, its local
	// fallback or a [NewMemory] limiter. A decision replayed through the
	// same arithmetic at Time decides the same (see package
	// core/replay). Zero for a fail-open admission.
	Time time.Time
	// Class is, for a path whose shared level has classes ([Share]), the
	// request's class as the rule names it. Empty otherwise.
	Class string
	// Reason is, for a denial by a path's shared level beyond its bucket,
	// why: [ReasonFairShare] or [ReasonReserve]. Empty otherwise.
	Reason string
}

// resultOf is d, a decision under p, as the caller's Result.
func resultOf(d *decision, p *plan) Result {
	var res Result
	res.set(d, p)
	return res
}

// set makes res d, a decision under p, as the caller's Result: resultOf
// in place, for the engine's outcome (see outcome).
//
// Field by field, every field: a composite literal was built in a
// temporary, zeroed, then copied over res, which cost a lone decision
// more code than the stores themselves (clientcost -cold).
func (res *Result) set(d *decision, p *plan) {
	res.Allowed = d.Allowed
	res.Remaining = int(d.Remaining)
	res.RetryAfter = time.Duration(d.Retry) * time.Microsecond
	res.Wait = time.Duration(d.Wait) * time.Microsecond
	res.ResetAfter = time.Duration(d.Reset) * time.Microsecond
	res.Limit = p.limits[d.Index]
	res.Locked, res.Degraded, res.DryRun, res.Warning = d.Locked, false, false, false
	res.Shadow, res.Level, res.Class, res.Reason = Shadows{}, "", "", ""
	res.Time = instant(d.At)
}

// instant is the Time of a decision made at us, unix microseconds; the
// zero Time for 0.
func instant(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

// LevelLimit returns r's Limit as metrics and headers name it: for a
// decision of a path of keys ([PathRule]), with its Name after the
// deciding level and a dot ("user.burst"), unnamed standing in for a
// limit without a Name ("user.unnamed"); otherwise r.Limit as it is.
func (r Result) LevelLimit(unnamed string) Limit {
	l := r.Limit
	if r.Level == "" {
		return l
	}
	name := l.Name
	if name == "" {
		name = unnamed
	}
	l.Name = r.Level + "." + name
	return l
}
