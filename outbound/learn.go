package outbound

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
)

// This file reads what an upstream says of its limits in a response's
// fields: RateLimit-Policy and RateLimit as in
// draft-ietf-httpapi-ratelimit-headers (the fields package policy writes;
// its ietf.go has the parameters' meaning), X-RateLimit-Limit, -Remaining
// and -Reset, and Retry-After. Whatever a field holds, reading it never
// panics and its advice can only pause calls (up to a bound) or lower a
// limit: anything else is ignored.

// advice is what one response says.
type advice struct {
	pause  time.Duration // pause calls this long; 0: no pause
	policy core.Limit    // the lowest policy announced, as a limit; zero: none
	burst  int           // X-RateLimit-Limit: most calls at once; 0: none
}

// maxField bounds the length of a field read; a longer one is ignored.
const maxField = 4096

// maxSeconds bounds a number of seconds read: larger ones are read as
// this, which any pause bound cuts shorter.
const maxSeconds = int64(core.MaxPenalty / time.Second)

// readAdvice reads what a response of status with header h, received at
// now, says; a pause is at most maxPause. memo may remember the last
// policy field read (nil: none).
func readAdvice(status int, h http.Header, now time.Time, maxPause time.Duration, memo *policyMemo) advice {
	var a advice
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if v := field(h, "Retry-After"); v != "" {
			a.pause = retryAfter(v, now)
		}
	}
	if v := field(h, "Ratelimit"); strings.Contains(v, "r=0") { // (nothing else pauses: skip the parse)
		for _, it := range items(v) {
			if r, ok := it.int("r"); ok && r == 0 {
				if t, ok := it.int("t"); ok && t > 0 {
					a.pause = max(a.pause, seconds(t))
				}
			}
		}
	}
	if field(h, "X-Ratelimit-Remaining") == "0" {
		if v, ok := number(field(h, "X-Ratelimit-Reset")); ok && v > 0 {
			a.pause = max(a.pause, resetIn(v, now))
		}
	}
	if v := field(h, "Ratelimit-Policy"); v != "" {
		a.policy = memo.policy(v)
	}
	if v, ok := number(field(h, "X-Ratelimit-Limit")); ok && v >= 1 && v <= math.MaxInt32 {
		a.burst = int(v)
	}
	a.pause = min(a.pause, maxPause)
	return a
}

// field returns h's first value of name (in its canonical form, so that
// the lookup costs no allocation), trimmed; "" when it is absent or
// longer than maxField.
func field(h http.Header, name string) string {
	vs := h[name]
	if len(vs) == 0 {
		return ""
	}
	v := vs[0]
	if len(v) > maxField {
		return ""
	}
	return strings.TrimSpace(v)
}

// number reads a non-negative decimal integer, saturating at the
// largest int64; ok false for anything else.
func number(s string) (int64, bool) {
	if s == "" || len(s) > maxField {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil { // all digits: out of range
		return math.MaxInt64, true
	}
	return v, true
}

// seconds is n seconds, at most maxSeconds.
func seconds(n int64) time.Duration {
	return time.Duration(min(n, maxSeconds)) * time.Second
}

// retryAfter reads Retry-After: delta seconds, or an HTTP date after now.
func retryAfter(v string, now time.Time) time.Duration {
	if n, ok := number(v); ok {
		return seconds(n)
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), seconds(maxSeconds))
	}
	return 0
}

// unixThreshold tells X-RateLimit-Reset's two readings apart: a value
// above it is a Unix time in seconds (as GitHub sends), one below it the
// seconds until the reset (as package policy sends).
const unixThreshold = 1_000_000_000

// resetIn reads X-RateLimit-Reset's value v at now.
func resetIn(v int64, now time.Time) time.Duration {
	if v <= unixThreshold {
		return seconds(v)
	}
	if d := time.Unix(min(v, now.Unix()+maxSeconds), 0).Sub(now); d > 0 {
		return d
	}
	return 0
}

// lowestPolicy returns the lowest of the policies items describe, as a
// limit that keeps any window of the policy's w seconds to its quota q:
// a rate of q-ceil(q/50) per w and a burst of ceil(q/50). Items of
// another quota unit than requests, or without a usable q or w, are
// ignored. The zero Limit when none is usable.
func lowestPolicy(its []item) core.Limit {
	var low core.Limit
	for _, it := range its {
		if u, ok := it.params["qu"]; ok && u != `"requests"` && u != "requests" {
			continue
		}
		q, okq := it.int("q")
		w, okw := it.int("w")
		if !okq || !okw || q < 1 || w < 1 || q > math.MaxInt32 || w > maxSeconds {
			continue
		}
		l := policyLimit(q, w)
		if low.Rate == 0 || slower(l, low) || !slower(low, l) && l.Burst < low.Burst {
			low = l
		}
	}
	return low
}

// policyMemo remembers the last RateLimit-Policy field read and its
// limit: an upstream sends the same one on every response. Its zero value
// and nil remember nothing yet; it is safe for concurrent use.
type policyMemo struct {
	last atomic.Pointer[policyRead]
}

type policyRead struct {
	field string
	limit core.Limit
}

// policy returns lowestPolicy of field's items.
func (m *policyMemo) policy(field string) core.Limit {
	if m == nil {
		return lowestPolicy(items(field))
	}
	if r := m.last.Load(); r != nil && r.field == field {
		return r.limit
	}
	l := lowestPolicy(items(field))
	m.last.Store(&policyRead{field: strings.Clone(field), limit: l})
	return l
}

// policyLimit is q calls per w seconds as a token bucket: at most
// burst + rate*w = q calls in any w seconds, whatever the upstream's
// windows.
func policyLimit(q, w int64) core.Limit {
	b := (q + 49) / 50
	if q-b < 1 {
		// One call per window: a call at once, then one per 2w.
		return core.Limit{Rate: 1, Period: 2 * time.Duration(w) * time.Second, Burst: 1}
	}
	return core.Limit{Rate: int(q - b), Period: time.Duration(w) * time.Second, Burst: int(b)}
}

// item is one member of a structured-field list: its value (a token or
// a quoted string, as written) and its parameters.
type item struct {
	value  string
	params map[string]string
}

// int returns parameter key as a non-negative integer.
func (it item) int(key string) (int64, bool) {
	return number(it.params[key])
}

// maxItems bounds the items read from one field.
const maxItems = 16

// items splits a structured-field list (RFC 9651) into its items, far
// enough for the draft's fields: members separated by commas, each a
// value then ";key=value" parameters, quoted strings kept whole (a comma
// or semicolon inside one does not split). A malformed member is kept as
// far as it reads; the caller ignores what it lacks.
func items(v string) []item {
	var out []item
	for _, member := range split(v, ',') {
		if len(out) == maxItems {
			break
		}
		parts := split(member, ';')
		it := item{value: strings.TrimSpace(parts[0]), params: map[string]string{}}
		for _, p := range parts[1:] {
			k, val, _ := strings.Cut(p, "=")
			k = strings.TrimSpace(k)
			if _, dup := it.params[k]; k != "" && !dup {
				it.params[k] = strings.TrimSpace(val)
			}
		}
		out = append(out, it)
	}
	return out
}

// split splits s at sep outside quoted strings (with backslash escapes).
func split(s string, sep byte) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
