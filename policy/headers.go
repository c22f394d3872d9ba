package policy

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
)

// HeaderStyle selects the rate-limit fields written on responses.
type HeaderStyle int8

const (
	// HeadersLegacy writes X-RateLimit-Limit (the limit's Burst: the most
	// requests that can be made at once), X-RateLimit-Remaining, and
	// X-RateLimit-Reset (seconds until the bucket is full again, rounded
	// up; a delta, not a timestamp).
	HeadersLegacy HeaderStyle = iota
	// HeadersIETF writes RateLimit-Policy and RateLimit as in
	// draft-ietf-httpapi-ratelimit-headers-10: one policy item per limit,
	// `"name";q=Rate;w=Period-in-seconds`, and for the limit that decided
	// `"name";r=Remaining;t=seconds`, where t is the reset time on success
	// and the retry time on a 429.
	HeadersIETF
	// HeadersBoth writes the legacy and the IETF fields.
	HeadersBoth
	// HeadersNone writes no rate-limit fields. Retry-After is still sent
	// on every 429.
	HeadersNone
)

// Header fields a verdict may carry, in the spelling used on the wire
// (names) and in Go's canonical form (canonical), which http.Header keys use.
const (
	fRetryAfter = iota
	fLimit
	fRemaining
	fReset
	fPolicy
	fRateLimit
	numFields
)

var (
	names     = [numFields]string{"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"}
	canonical = [numFields]string{"Retry-After", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit"}
)

// fields computes the verdict's header fields into vals, "" for absent ones.
func (v *Verdict) fields(vals *[numFields]string) {
	if !v.decided {
		return
	}
	res := &v.Result
	idx := -1 // the deciding limit in the rule; -1 for a fallback limit
	for i, l := range v.rule.limits {
		if l == res.Limit {
			idx = i
			break
		}
	}
	if v.Action == Deny {
		vals[fRetryAfter] = strconv.FormatInt(ceilSeconds(res.RetryAfter), 10)
	}
	if v.style == HeadersLegacy || v.style == HeadersBoth {
		if idx >= 0 {
			vals[fLimit] = v.rule.burstField[idx]
		} else {
			vals[fLimit] = strconv.Itoa(res.Limit.Burst)
		}
		vals[fRemaining] = strconv.Itoa(res.Remaining)
		vals[fReset] = strconv.FormatInt(ceilSeconds(res.ResetAfter), 10)
	}
	if v.style == HeadersIETF || v.style == HeadersBoth {
		vals[fPolicy] = v.rule.policyField
		t := res.ResetAfter
		if !res.Allowed {
			t = res.RetryAfter
		}
		item := limitItem(res.Limit)
		if idx >= 0 {
			item = v.rule.items[idx]
		}
		vals[fRateLimit] = item + ";r=" + strconv.Itoa(res.Remaining) + ";t=" + strconv.FormatInt(ceilSeconds(t), 10)
	}
}

// Headers calls set for each response field the verdict carries: the
// rate-limit fields of the policy's style for decided requests, and
// Retry-After (delta seconds, rounded up, never earlier than the real wait)
// on a Deny. Names are spelled as on the wire ("X-RateLimit-Limit").
func (v *Verdict) Headers(set func(name, value string)) {
	var vals [numFields]string
	v.fields(&vals)
	for i, val := range vals {
		if val != "" {
			set(names[i], val)
		}
	}
}

// WriteHeaders sets the same fields as [Verdict.Headers] in h, an
// http.Header, under Go's canonical names and with one allocation for all
// their value slices.
func (v *Verdict) WriteHeaders(h map[string][]string) {
	var vals [numFields]string
	v.fields(&vals)
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
			h[canonical[i]] = backing[len(backing)-1 : len(backing) : len(backing)]
		}
	}
}

// Body returns the default answer's content type and body for a Deny or a
// Fail: the status text, or problem details with [WithProblemJSON], whose
// detail says why (when to retry; or that the request has no key, that the
// route is not known where the middleware runs, that the limiter is
// misconfigured or its store unavailable). It never includes an error's
// text.
func (v *Verdict) Body() (contentType string, body []byte) {
	title := statusText(v.Status)
	if !v.problem {
		return "text/plain; charset=utf-8", []byte(title + "\n")
	}
	var b strings.Builder
	b.WriteString(`{"type":"about:blank","title":"`)
	b.WriteString(title)
	b.WriteString(`","status":`)
	b.WriteString(strconv.Itoa(v.Status))
	switch {
	case v.Action == Deny:
		b.WriteString(`,"detail":"Rate limit exceeded; retry after `)
		b.WriteString(strconv.FormatInt(ceilSeconds(v.Result.RetryAfter), 10))
		b.WriteString(` s."`)
	case v.detail != "":
		b.WriteString(`,"detail":"`)
		b.WriteString(v.detail) // a constant of this package: nothing to escape
		b.WriteString(`"`)
	}
	b.WriteString("}")
	return "application/problem+json", []byte(b.String())
}

func statusText(code int) string {
	switch code {
	case 400:
		return "Bad Request"
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
	return int64((d + time.Second - 1) / time.Second)
}

// limitItem is a limit's name as a structured-field string: its Name, or
// "<rate>-per-<period>" when it has none.
func limitItem(l core.Limit) string {
	name := l.Name
	if name == "" {
		name = strconv.Itoa(l.Rate) + "-per-" + l.Period.String()
	}
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
