package policy

import (
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
)

// This file is what draft-ietf-httpapi-ratelimit-headers-11 asks of the
// RateLimit-Policy and RateLimit fields and of a 429's problem details, as
// tables: a later revision of the draft that renames a parameter, adds one
// or changes what one means is a change to a table row.
//
// A token bucket (Rate per Period, Burst at once) is described in the
// draft's terms this way:
//   - a policy's quota q and window w: at most Burst requests in any window
//     of the time the bucket takes to refill its Burst. A client keeping to
//     that is never denied, whatever the pattern of its requests, and one
//     that drains the bucket gets it back full after w, as with a fixed
//     window. w is rounded up to whole seconds (the draft has no finer
//     unit), which only ever understates the rate.
//   - a service limit's r and t: r requests can be made now, and t is the
//     effective window, within which no more than r can be: the time until
//     the limit has an (r+1)th request to give. t is rounded up like
//     Retry-After, and on a 429 it ends no later than Retry-After.
//   - the quota unit qu is left out unless WithQuotaUnit names one: the
//     draft's default is requests. (With WithCost, q and r count cost
//     units: name the unit they are, such as content-bytes.)
//
// A concurrency cap (WithConcurrency) is a policy of its own quota unit,
// concurrent-requests, with q its Max. It has no window: the draft makes
// both w and t optional, and a cap has neither a window nor a time at
// which a slot is known to free, so its items leave them out. A refusal
// says r=0 and, in Retry-After, one second (see capRetry).

// quota is what a RateLimit-Policy item says of a rate limit or a cap.
type quota struct {
	q    int64  // the quota: a limit's Burst, a cap's Max
	w    int64  // the window in seconds; 0 for none (a cap)
	unit string // qu; "" leaves it out
}

// policyParams are the integer parameters of a RateLimit-Policy item, in
// order, each a function of the quota the item describes that also says
// whether the item has it. The quota unit follows them.
var policyParams = []struct {
	key   string
	value func(*quota) (int64, bool)
}{
	{"q", func(q *quota) (int64, bool) { return q.q, true }},
	{"w", func(q *quota) (int64, bool) { return q.w, q.w > 0 }},
}

// limitParams are the parameters of a RateLimit item, in order, each a
// function of the decision it describes that also says whether the item
// has it.
var limitParams = []struct {
	key   string
	value func(decided) (int64, bool)
}{
	{"r", func(d decided) (int64, bool) { return int64(d.remaining), true }},
	{"t", func(d decided) (int64, bool) { return ceilSeconds(d.window), d.cap == nil }},
}

// The problem type of a 429 with [WithProblemJSON], with its registered
// title and the member naming the limits that denied.
const (
	quotaExceededType  = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	quotaExceededTitle = "Quota Exceeded"
	violatedPolicies   = "violated-policies"
)

// policyItem returns l's item in RateLimit-Policy, its name (see
// limitItem) and parameters.
func policyItem(l core.Limit, unit string) string {
	return quotaItem(limitItem(l), quota{q: int64(l.Burst), w: refillSeconds(l), unit: unit})
}

// capPolicyItem returns c's item in RateLimit-Policy, its name (see
// capItem) and parameters.
func capPolicyItem(c core.ConcurrencyLimit) string {
	return quotaItem(capItem(c), quota{q: int64(c.Max), unit: concurrentRequests})
}

// quotaItem is the RateLimit-Policy item named name (an sf-string) for q.
func quotaItem(name string, q quota) string {
	b := []byte(name)
	for _, p := range policyParams {
		if v, ok := p.value(&q); ok {
			b = append(b, ';')
			b = append(b, p.key...)
			b = append(b, '=')
			b = strconv.AppendInt(b, v, 10)
		}
	}
	if q.unit != "" {
		b = append(b, `;qu="`...)
		b = append(b, q.unit...)
		b = append(b, '"')
	}
	return string(b)
}

// concurrentRequests is the quota unit of a concurrency cap.
const concurrentRequests = "concurrent-requests"

// quotaUnits are the quota units the draft registers, the values
// WithQuotaUnit accepts.
var quotaUnits = []string{"requests", "content-bytes", concurrentRequests}

// serviceLimit is the RateLimit field's value: one item, for the deciding
// limit.
func serviceLimit(d decided) string {
	var buf [96]byte
	b := append(buf[:0], d.item()...)
	for _, p := range limitParams {
		if v, ok := p.value(d); ok {
			b = append(b, ';')
			b = append(b, p.key...)
			b = append(b, '=')
			b = strconv.AppendInt(b, v, 10)
		}
	}
	return string(b)
}

// writeQuotaExceeded writes a Deny's problem details: the draft's
// quota-exceeded type, with violated-policies naming the limit that denied
// as RateLimit-Policy does. An item is a structured-field string of
// printable ASCII in which only '"' and '\' are escaped, each by a
// backslash: it is a JSON string too, with the same value.
func writeQuotaExceeded(b *strings.Builder, d *decided) {
	what := "Rate limit exceeded"
	if d.cap != nil {
		what = "Too many requests in flight"
	}
	writeProblem(b, quotaExceededType, quotaExceededTitle, 429,
		what+"; retry after "+strconv.FormatInt(ceilSeconds(d.retry), 10)+" s.")
	b.WriteString(`,"` + violatedPolicies + `":[`)
	b.WriteString(d.item())
	b.WriteString("]")
	writeShareMembers(b, d)
	b.WriteString("}")
}

// refillSeconds is how long l's bucket takes to refill its Burst,
// Burst*Period/Rate, in whole seconds rounded up; at least 1. An interval
// refill takes ceil(Burst/Rate) whole intervals; a calendar quota's window
// is its period, the one current at now (see calendarSeconds).
func refillSeconds(l core.Limit) int64 {
	switch {
	case isCalendar(l):
		return calendarSeconds(l, time.Now())
	case l.Rate <= 0 || l.Burst <= 0 || l.Period <= 0:
		return 1
	case l.Refill == core.RefillInterval:
		n := (uint64(l.Burst) + uint64(l.Rate) - 1) / uint64(l.Rate)
		return max(1, int64(min(mulDivCeil(n, uint64(l.Period), uint64(time.Second)), 1<<53)))
	}
	us := mulDivCeil(uint64(l.Burst), uint64(l.Period/time.Microsecond), uint64(l.Rate))
	s := (us + 999_999) / 1_000_000
	if s < 1 {
		return 1
	}
	if s > 1<<53 {
		return 1 << 53
	}
	return int64(s)
}

// isCalendar reports whether l is a calendar quota.
func isCalendar(l core.Limit) bool {
	return l.Refill != core.RefillContinuous && l.Refill != core.RefillInterval
}

// calendarSeconds is the length in seconds of l's calendar period holding
// now: a day of 23, 24 or 25 hours, a month of 28 to 31 days; at least 1.
func calendarSeconds(l core.Limit, now time.Time) int64 {
	start, end := l.Window(now)
	return max(1, ceilSeconds(end.Sub(start)))
}

// currentPolicy is r's RateLimit-Policy value with each calendar quota's
// w set to the length of its period current now: r.policyField, made
// once, has the periods current when r was prepared. The field's items
// are r's limits' in order, each its name, then ";q=<Burst>;w=<seconds>".
func currentPolicy(r *rule) string {
	f := r.policyField
	if !slices.ContainsFunc(r.limits, isCalendar) {
		return f
	}
	var now time.Time
	at := 0
	for i, l := range r.limits {
		prefix := r.items[i] + ";q=" + strconv.Itoa(l.Burst) + ";w="
		j := strings.Index(f[at:], prefix)
		if j < 0 {
			return f
		}
		at += j + len(prefix)
		end := at
		for end < len(f) && f[end] >= '0' && f[end] <= '9' {
			end++
		}
		if !isCalendar(l) {
			at = end
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		w := strconv.FormatInt(calendarSeconds(l, now), 10)
		f = f[:at] + w + f[end:]
		at += len(w)
	}
	return f
}

// effectiveWindow is how long until l, with remaining requests left now
// and its bucket full again after reset, has a request more to give:
// reset less the refill of the Burst-remaining-1 requests between the next
// one and a full bucket. (A full bucket's next request is one refill
// interval away.) reset is rounded up to whole microseconds and the refill
// down, so the window is never short of the truth, and at most a
// microsecond over it.
//
// A stepped limit gives more at the start of its next window. An
// interval refill's bucket, Burst-remaining short, is full again after
// ceil(that/Rate) windows, the first of which ends reset less the others.
// A calendar quota's reset is its boundary. A full bucket has nothing
// more before a whole window: one interval, or the current period's
// length (never short of the truth).
func effectiveWindow(l core.Limit, remaining int, reset time.Duration) time.Duration {
	switch {
	case l.Refill == core.RefillInterval && l.Rate > 0:
		if reset <= 0 {
			return l.Period
		}
		n := (max(l.Burst-remaining, 1) + l.Rate - 1) / l.Rate
		if w := reset - time.Duration(n-1)*l.Period; w > 0 {
			return w
		}
		return reset
	case isCalendar(l):
		if reset <= 0 {
			return time.Duration(calendarSeconds(l, time.Now())) * time.Second
		}
		return reset
	}
	if l.Rate <= 0 || l.Period <= 0 {
		return reset
	}
	remaining = min(max(remaining, 0), max(l.Burst, 0))
	ns := uint64(l.Period)
	if n := l.Burst - remaining - 1; n >= 0 {
		if w := reset - time.Duration(mulDiv(uint64(n), ns, uint64(l.Rate))); w > 0 {
			return w
		}
		return 0
	}
	return addSat(reset, time.Duration(mulDivCeil(1, ns, uint64(l.Rate))))
}

// mulDiv is a*b/c rounded down, saturating at 2^62 (far beyond any
// duration a valid limit gives).
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return 1 << 62
	}
	q, _ := bits.Div64(hi, lo, c)
	return min(q, 1<<62)
}

// mulDivCeil is a*b/c rounded up, saturating as mulDiv does.
func mulDivCeil(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return 1 << 62
	}
	q, r := bits.Div64(hi, lo, c)
	if r != 0 {
		q++
	}
	return min(q, 1<<62)
}

// limitItem is a limit's name as a structured-field string: its Name, or
// its text form ("600/m", "100/s burst 20") when it has none.
func limitItem(l core.Limit) string {
	return sfString(limitName(l))
}

// limitName is l's Name, or its text form when it has none.
func limitName(l core.Limit) string {
	name := l.Name
	if name == "" {
		if text, err := l.MarshalText(); err == nil {
			name = string(text)
		} else {
			name = l.String()
		}
		name = strings.ReplaceAll(name, "µ", "u") // "500µs": keep it ASCII
	}
	return name
}

// capItem is a concurrency cap's name as a structured-field string: its
// Name, or "concurrency-<Max>" when it has none.
func capItem(c core.ConcurrencyLimit) string {
	if c.Name != "" {
		return sfString(c.Name)
	}
	return sfString("concurrency-" + strconv.Itoa(c.Max))
}

// sfString is name as a structured-field string: quoted, with '"' and
// '\' escaped and any byte that is not printable ASCII replaced by '?'.
func sfString(name string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?') // sf-strings are printable ASCII only
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
