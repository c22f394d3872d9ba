package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
)

// HeaderStyle selects the rate-limit fields written on responses. Every
// field describes the limit that decided the request ([core.Result.Limit]:
// the one that denied, or else the one with the fewest tokens left), so
// that with several limits (10/s and 1000/h) the numbers of one field all
// belong to one limit.
//
// With a concurrency cap ([WithConcurrency]), RateLimit-Policy ends with an
// item for the cap, `"name";q=Max;qu="concurrent-requests"`, without w: a
// cap has no window. The other fields describe the rate limits, except on
// a request the cap refused: they then describe the cap, RateLimit as
// `"name";r=0` without t (no one can tell when a slot frees), and
// X-RateLimit-Limit, -Remaining and -Reset as Max, 0 and 1, the last
// agreeing with Retry-After.
type HeaderStyle int8

const (
	// HeadersLegacy writes X-RateLimit-Limit (the deciding limit's Burst:
	// the most requests that can be made at once), X-RateLimit-Remaining
	// (the requests it would still admit now) and X-RateLimit-Reset
	// (seconds until its bucket is full again, rounded up; a delta, not a
	// timestamp).
	HeadersLegacy HeaderStyle = iota
	// HeadersIETF writes RateLimit-Policy and RateLimit as in
	// draft-ietf-httpapi-ratelimit-headers-11. RateLimit-Policy has one
	// item per limit, `"name";q=Burst;w=seconds`, w being the time the
	// bucket takes to refill its Burst, rounded up to whole seconds: a
	// client that sends at most q requests in any w seconds is never
	// denied by that limit. RateLimit has one item, for the deciding
	// limit, `"name";r=Remaining;t=seconds`: r requests can be made now,
	// and t is the draft's effective window, the seconds (rounded up)
	// until the limit has a request more than r to give; on a 429 it ends
	// no later than Retry-After. An unnamed limit is named by its text
	// form, as [core.ParseLimit] reads it: "600/m", "100/s burst 20".
	HeadersIETF
	// HeadersBoth writes the legacy and the IETF fields.
	HeadersBoth
	// HeadersNone writes no rate-limit fields. Retry-After is still sent
	// on every 429.
	HeadersNone
)

// The response fields a verdict may carry.
const (
	fRetryAfter = iota
	fLimit
	fRemaining
	fReset
	fPolicy
	fRateLimit
	fWarning
	numFields
)

// field is one response field: its name as written on the wire, its name
// in Go's canonical form (which http.Header keys use), and its value for a
// decision, "" when the decision has none.
type field struct {
	name, canonical string
	value           func(decided) string // by value: a pointer through a func table would make every verdict's decided escape to the heap
}

// fields is every field a verdict may carry, by number. A field of the
// IETF draft takes its parameters from the tables in ietf.go.
var fields = [numFields]field{
	fRetryAfter: {"Retry-After", "Retry-After", func(d decided) string {
		if !d.deny {
			return ""
		}
		return strconv.FormatInt(ceilSeconds(d.retry), 10)
	}},
	fLimit: {"X-RateLimit-Limit", "X-Ratelimit-Limit", func(d decided) string {
		switch {
		case d.cap != nil:
			return d.cap.max
		case d.idx >= 0:
			return d.rule.burstField[d.idx]
		}
		return strconv.Itoa(d.limit.Burst)
	}},
	fRemaining: {"X-RateLimit-Remaining", "X-Ratelimit-Remaining", func(d decided) string {
		return strconv.Itoa(d.remaining)
	}},
	fReset: {"X-RateLimit-Reset", "X-Ratelimit-Reset", func(d decided) string {
		return strconv.FormatInt(ceilSeconds(d.reset), 10)
	}},
	fPolicy: {"RateLimit-Policy", "Ratelimit-Policy", func(d decided) string {
		return currentPolicy(d.rule) // d.rule.policyField, with calendar periods updated
	}},
	fRateLimit: {"RateLimit", "Ratelimit", serviceLimit},
	fWarning: {"X-RateLimit-Warning", "X-Ratelimit-Warning", func(d decided) string {
		if !d.warning {
			return ""
		}
		return d.rule.warnField
	}},
}

// styleFields lists the rate-limit fields of each style; Retry-After comes
// on every Deny whatever the style.
var styleFields = [...][]int{
	HeadersLegacy: {fLimit, fRemaining, fReset},
	HeadersIETF:   {fPolicy, fRateLimit},
	HeadersBoth:   {fLimit, fRemaining, fReset, fPolicy, fRateLimit},
	HeadersNone:   nil,
}

// decided is what the fields of one verdict say: the deciding limit and its
// numbers, taken from the verdict's core.Result, or the concurrency cap
// that refused the request.
type decided struct {
	rule      *rule
	cap       *capRule // the cap that refused the request; nil when a rate limit decided
	idx       int      // the deciding limit's index in rule.limits; -1 for one not in it (the local fallback's share)
	limit     core.Limit
	level     string // the deciding level of a path (see WithPath); "" for a key
	reason    string // a shared level's denial beyond its bucket (see WithShare); "" otherwise
	class     string // the request's class (see WithClass); "" for none
	remaining int
	reset     time.Duration // until the limit's bucket is full again
	window    time.Duration // the draft's effective window: until the limit has more than remaining to give
	deny      bool
	warning   bool          // admitted over the warning threshold (see WithWarning)
	retry     time.Duration // Retry-After's wait, jitter included; for a Deny
}

// decide fills d from v, and reports whether v carries fields at all.
func (v *Verdict) decide(d *decided) bool {
	if !v.decided {
		return false
	}
	if v.capped {
		// No slot is known to free at any time: a refusal advises
		// capRetry, and its RateLimit item has no window.
		*d = decided{rule: v.rule, cap: v.rule.cap, idx: -1, reset: capRetry, deny: true, retry: addSat(capRetry, v.jitter)}
		return true
	}
	res := &v.Result
	*d = decided{rule: v.rule, idx: -1, limit: res.Limit, level: res.Level, remaining: res.Remaining, reset: res.ResetAfter, warning: res.Warning && v.Action != Deny, reason: res.Reason, class: res.Class}
	for i, l := range v.rule.limits {
		if l == res.Limit && (v.rule.levels == nil || v.rule.levels[i] == res.Level) {
			d.idx = i
			break
		}
	}
	d.window = effectiveWindow(res.Limit, res.Remaining, res.ResetAfter)
	if v.Action == Deny {
		d.deny = true
		d.retry = addSat(res.RetryAfter, v.jitter)
		// Nothing more can be had before the request's own retry, and a
		// locked key gives nothing before the lock ends: the window ends
		// no later than Retry-After, as the draft asks.
		if res.Locked || d.window > res.RetryAfter {
			d.window = res.RetryAfter
		}
	}
	return true
}

// item is the RateLimit item name of what decided: the deciding limit's,
// or the cap's.
func (d *decided) item() string {
	switch {
	case d.cap != nil:
		return d.cap.item
	case d.idx >= 0:
		return d.rule.items[d.idx]
	case d.level != "":
		return sfString(d.level + "." + limitName(d.limit))
	}
	return limitItem(d.limit)
}

// values computes the verdict's fields into vals, "" for absent ones.
func (v *Verdict) values(vals *[numFields]string) {
	var d decided
	if !v.decide(&d) {
		return
	}
	vals[fRetryAfter] = fields[fRetryAfter].value(d)
	if int(v.style) < len(styleFields) {
		for _, f := range styleFields[v.style] {
			vals[f] = fields[f].value(d)
		}
	}
	vals[fWarning] = fields[fWarning].value(d) // whatever the style: WithWarning asks for it
}

// Headers calls set for each response field the verdict carries: the
// rate-limit fields of the policy's style for decided requests, and
// Retry-After (delta seconds, rounded up, never earlier than the real wait;
// later by up to the [WithRetryJitter] bound) on a Deny. Names are spelled
// as on the wire ("X-RateLimit-Limit").
func (v *Verdict) Headers(set func(name, value string)) {
	var vals [numFields]string
	v.values(&vals)
	for i, val := range vals {
		if val != "" {
			set(fields[i].name, val)
		}
	}
}

// WriteHeaders sets the same fields as [Verdict.Headers] in h, an
// http.Header, under Go's canonical names and with one allocation for all
// their value slices.
func (v *Verdict) WriteHeaders(h map[string][]string) {
	var vals [numFields]string
	v.values(&vals)
	n := 0
	for _, val := range vals {
		if val != "" {
			n++
		}
	}
	if n == 0 {
		return
	}
	backing := make([]string, 0, n)
	for i, val := range vals {
		if val != "" {
			backing = append(backing, val)
			h[fields[i].canonical] = backing[len(backing)-1 : len(backing) : len(backing)]
		}
	}
}

// Body returns the default answer's content type and body for a Deny or a
// Fail: the status text, or problem details with [WithProblemJSON]. A
// Deny's problem is the draft's quota-exceeded type, naming the limit that
// denied in violated-policies (as RateLimit-Policy names it) and saying in
// its detail when to retry (as Retry-After does); a deny-listed request's
// is [DenyListProblem]; another Fail's is about:blank, whose detail says
// why (the request has no key, the route is not known where the
// middleware runs, the limiter is misconfigured or its store
// unavailable). It never includes an error's text.
func (v *Verdict) Body() (contentType string, body []byte) {
	if !v.problem {
		return "text/plain; charset=utf-8", []byte(statusText(v.Status) + "\n")
	}
	var b strings.Builder
	var d decided
	if v.Action == Deny && v.decide(&d) {
		writeQuotaExceeded(&b, &d)
	} else {
		writeProblem(&b, problemType(v.Err), statusText(v.Status), v.Status, v.detail)
		b.WriteString("}")
	}
	return "application/problem+json", []byte(b.String())
}

// writeProblem writes the members every problem has, leaving the object
// open. detail is a constant of this package or built from numbers: there
// is nothing to escape.
func writeProblem(b *strings.Builder, typ, title string, status int, detail string) {
	b.WriteString(`{"type":"`)
	b.WriteString(typ)
	b.WriteString(`","title":"`)
	b.WriteString(title)
	b.WriteString(`","status":`)
	b.WriteString(strconv.Itoa(status))
	if detail != "" {
		b.WriteString(`,"detail":"`)
		b.WriteString(detail)
		b.WriteString(`"`)
	}
}

func statusText(code int) string {
	switch code {
	case 400:
		return "Bad Request"
	case 403:
		return "Forbidden"
	case 429:
		return "Too Many Requests"
	case 503:
		return "Service Unavailable"
	}
	return "Internal Server Error"
}

// ceilSeconds rounds d up to whole seconds; any positive wait is at least 1.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1
}

// addSat is a+b for non-negative durations, saturating instead of
// overflowing.
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// checkRetryJitter validates the bound given to [WithRetryJitter].
func checkRetryJitter(max time.Duration) error {
	if max < 0 {
		return fmt.Errorf("WithRetryJitter: negative duration %s", max)
	}
	return nil
}

// drawJitter returns a random duration from 0 to max inclusive, to add to
// one denial's Retry-After.
func drawJitter(max time.Duration) time.Duration {
	switch {
	case max <= 0:
		return 0
	case max == math.MaxInt64:
		return time.Duration(rand.Int64N(math.MaxInt64))
	}
	return time.Duration(rand.Int64N(int64(max) + 1))
}
