package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/keyfunc"
)

// Policy is what a rate-limiting middleware does with each request, written
// once for every framework: skip, key, limit choice, cost, decision (or
// wait), and the headers and status of the answer. The adapter packages
// (httplimit, ginlimit, echolimit, fiberlimit) wrap their framework's request
// in a [keyfunc.Request], call [Policy.Decide], and write the [Verdict].
//
// A Policy is safe for concurrent use. Create one with [NewPolicy].
type Policy struct {
	lim     *Limiter
	key     keyfunc.Func
	base    *plan
	plans   planCache
	skip    func(keyfunc.Request) bool
	cost    func(keyfunc.Request) int
	limitFn func(keyfunc.Request) (Limit, error)
	headers HeaderStyle
	dryRun  bool
	wait    time.Duration
	problem bool
}

// PolicyOption configures a [Policy]. The adapters offer each of these
// under the same name, with their framework's request type where the option
// takes a function.
type PolicyOption func(*Policy)

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

// WithSkip exempts requests for which f reports true (health checks,
// allowlists): they pass without a decision and without headers.
//
// Default: none skipped.
func WithSkip(f func(keyfunc.Request) bool) PolicyOption { return func(p *Policy) { p.skip = f } }

// WithCost sets each request's cost in tokens. A cost below 1 or above the
// limit's Burst is an error (answered 500 by default), never a silent pass.
//
// Default: 1.
func WithCost(f func(keyfunc.Request) int) PolicyOption { return func(p *Policy) { p.cost = f } }

// WithLimitFunc chooses the limit per request, replacing the one passed to
// [NewPolicy] (for example by tenant plan: free 60/min, pro 600/min). An
// error from f is answered like a key error. Limits from [WithLimits] still
// apply on top.
//
// Default: the limit passed to NewPolicy for every request.
func WithLimitFunc(f func(keyfunc.Request) (Limit, error)) PolicyOption {
	return func(p *Policy) { p.limitFn = f }
}

// WithLimits adds limits checked and consumed together with the main one on
// the same key, for example a per-hour cap beside a per-second rate.
//
// Default: none.
func WithLimits(more ...Limit) PolicyOption {
	return func(p *Policy) { p.plans.extra = append([]Limit(nil), more...) }
}

// WithHeaders selects the rate-limit response fields.
//
// Default: [HeadersLegacy].
func WithHeaders(style HeaderStyle) PolicyOption { return func(p *Policy) { p.headers = style } }

// WithDryRun makes the policy decide, observe and set headers as usual but
// never block: denied requests continue, with [Verdict.Result] telling what
// would have happened. Use it to roll out a new limit.
//
// Default: off.
func WithDryRun(on bool) PolicyOption { return func(p *Policy) { p.dryRun = on } }

// WithWait makes a request that would be denied wait up to max for its
// tokens instead (traffic smoothing): it reserves them and continues when
// they are due. A request whose tokens cannot be due within max is denied at
// once, reserving nothing. The request's context ends the wait. Zero
// disables waiting.
//
// Default: 0 (deny at once).
func WithWait(max time.Duration) PolicyOption { return func(p *Policy) { p.wait = max } }

// WithProblemJSON makes default error and 429 bodies RFC 9457 problem
// details (application/problem+json) instead of plain text.
//
// Default: off (text/plain status text).
func WithProblemJSON(on bool) PolicyOption { return func(p *Policy) { p.problem = on } }

// NewPolicy returns the policy limiting requests by key under limit on lim.
// It returns an error for a nil limiter or key function, an invalid limit,
// an invalid extra limit or a negative wait.
func NewPolicy(lim *Limiter, limit Limit, key keyfunc.Func, opts ...PolicyOption) (*Policy, error) {
	if lim == nil {
		return nil, errors.New("core: nil Limiter")
	}
	if key == nil {
		return nil, errors.New("core: nil key function")
	}
	p := &Policy{lim: lim, key: key}
	for _, opt := range opts {
		opt(p)
	}
	if p.wait < 0 {
		return nil, fmt.Errorf("core: WithWait: negative duration %s", p.wait)
	}
	if p.headers < HeadersLegacy || p.headers > HeadersNone {
		return nil, fmt.Errorf("core: WithHeaders: unknown style %d", p.headers)
	}
	p.plans.fallback, p.plans.warn = lim.plans.fallback, lim.plans.warn
	base, err := p.plans.getOne(limit)
	if err != nil {
		return nil, err
	}
	p.base = base
	return p, nil
}

// Action is what the adapter must do with a request.
type Action int8

const (
	// Continue passes the request on, after writing the verdict's
	// headers.
	Continue Action = iota
	// Deny answers 429 (or calls the user's deny handler), with the
	// verdict's headers, Retry-After included.
	Deny
	// Fail answers the verdict's Status (or calls the user's error
	// handler with Err).
	Fail
)

// Verdict is a policy's answer for one request.
type Verdict struct {
	// Action says what to do.
	Action Action
	// Result is the limiter's decision; zero when skipped or failed.
	Result Result
	// Err is why the request failed, for Fail: it wraps
	// [keyfunc.ErrNoKey], [ErrUnavailable], [ErrInvalidLimit] or a
	// context error.
	Err error
	// Status is the HTTP status of the default answer: 429 for Deny; for
	// Fail 400 (no key), 503 (store unavailable under FailClosed, or the
	// request gave up while waiting) or 500 (anything else); 0 for
	// Continue.
	Status int

	style   HeaderStyle
	plan    *plan
	decided bool
	problem bool
}

// Decide runs the policy for one request. It never panics on request
// content; failures come back as a Verdict with Action Fail.
func (p *Policy) Decide(ctx context.Context, r keyfunc.Request) Verdict {
	if p.skip != nil && p.skip(r) {
		return Verdict{Action: Continue}
	}
	key, err := p.key(r)
	if err != nil {
		return p.fail(err)
	}
	pl := p.base
	if p.limitFn != nil {
		l, err := p.limitFn(r)
		if err != nil {
			return p.fail(err)
		}
		if pl, err = p.plans.getOne(l); err != nil {
			return p.fail(err)
		}
	}
	n := 1
	if p.cost != nil {
		n = p.cost(r)
	}
	var res Result
	if p.wait > 0 {
		res, err = p.waitFor(ctx, key, pl, n)
	} else {
		res, _, err = p.lim.decide(ctx, key, pl, n, 0)
	}
	if err != nil {
		return p.fail(err)
	}
	v := Verdict{Result: res, style: p.headers, plan: pl, decided: true, problem: p.problem}
	if !res.Allowed && !p.dryRun {
		v.Action, v.Status = Deny, 429
	}
	return v
}

// waitFor reserves n tokens due within the policy's wait and sleeps until
// they are.
func (p *Policy) waitFor(ctx context.Context, key string, pl *plan, n int) (Result, error) {
	wctx, cancel := context.WithTimeout(ctx, p.wait)
	defer cancel()
	res, err := p.lim.wait(wctx, key, pl, n)
	if err != nil && res.Allowed && ctx.Err() == nil {
		// Our own bound ended the sleep as the tokens fell due: the
		// reservation stands.
		err = nil
	}
	return res, err
}

func (p *Policy) fail(err error) Verdict {
	v := Verdict{Action: Fail, Err: err, Status: 500, problem: p.problem}
	switch {
	case errors.Is(err, keyfunc.ErrNoKey):
		v.Status = 400
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		v.Status = 503
	}
	return v
}

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
	idx := -1 // the deciding limit in the plan; -1 for a fallback limit
	for i, l := range v.plan.limits {
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
			vals[fLimit] = v.plan.burstField[idx]
		} else {
			vals[fLimit] = strconv.Itoa(res.Limit.Burst)
		}
		vals[fRemaining] = strconv.Itoa(res.Remaining)
		vals[fReset] = strconv.FormatInt(ceilSeconds(res.ResetAfter), 10)
	}
	if v.style == HeadersIETF || v.style == HeadersBoth {
		vals[fPolicy] = v.plan.policyField
		t := res.ResetAfter
		if !res.Allowed {
			t = res.RetryAfter
		}
		item := limitItem(res.Limit)
		if idx >= 0 {
			item = v.plan.items[idx]
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
// Fail: the status text, or problem details with [WithProblemJSON]. It
// never includes an error's text.
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
	if v.Action == Deny {
		b.WriteString(`,"detail":"Rate limit exceeded; retry after `)
		b.WriteString(strconv.FormatInt(ceilSeconds(v.Result.RetryAfter), 10))
		b.WriteString(` s."`)
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
func limitItem(l Limit) string {
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

// policyFieldOf is the RateLimit-Policy value for limits.
func policyFieldOf(limits []Limit) string {
	items := make([]string, len(limits))
	for i, l := range limits {
		items[i] = limitItem(l) + ";q=" + strconv.Itoa(l.Rate) + ";w=" + strconv.FormatInt(ceilSeconds(l.Period), 10)
	}
	return strings.Join(items, ", ")
}
