// Package outbound limits the calls a fleet of replicas makes to an
// upstream API (an LLM, a payment or SCM API, a cloud API) to one budget
// shared by every replica, and learns that budget from what the upstream
// says.
//
// A [Budget] takes from a fleet-wide token bucket per upstream key, kept
// by a [core.Limiter] in Redis, before each call; [Budget.Transport] is
// an [http.RoundTripper] doing so for an http.Client:
//
//	budget, err := outbound.New(lim, core.PerMinute(100), outbound.WithName("github"))
//	client := &http.Client{Transport: budget.Transport(outbound.Host(), nil)}
//
// A call the budget cannot take waits within its request's context (or,
// with [WithFailFast], fails at once) with an error wrapping [ErrLimited].
//
// # What the upstream says
//
// Each response is read for what the upstream says of its limits:
//
//   - Retry-After on a 429 or a 503, in seconds or as a date, pauses every
//     replica's calls to that upstream key until then ([core.Rule.Lock]
//     in Redis): one replica's 429 is the whole fleet's.
//   - RateLimit (draft-ietf-httpapi-ratelimit-headers) with r=0 and t, and
//     X-RateLimit-Remaining: 0 with X-RateLimit-Reset (seconds, or a Unix
//     time), pause the same way until the quota comes back.
//   - RateLimit-Policy items of quota q per window w seconds lower the
//     limit: the budget keeps to q-ceil(q/50) per w with a burst of
//     ceil(q/50), so that no window of w seconds, fixed or sliding, holds
//     more than q calls. X-RateLimit-Limit lowers the burst.
//
// What the upstream says can only lower the configured limit or pause
// calls, never raise the limit: a policy above it, a negative or
// malformed value, a quota unit other than requests are ignored, and a
// pause is at most [WithMaxPause]. A pause is written to Redis, for every
// replica. A lowered limit is too: it is an entry of an override set
// ([overrides.Set], named "outbound:" and the budget's name), which every
// replica reads within a second, so a replica that never saw the
// upstream's policy decides under it. It stands until a response announces
// another (a different policy is learned in its place, one at or above the
// configured limit removes it), and an entry above the configured limit is
// never a reason to raise it.
//
// # Hot upstreams and degradation
//
// The bucket of an upstream key is decided with token leases
// ([core.Rule.WithTokenLeases]): a busy replica takes tokens in batches
// and spends them without a round trip per call. While Redis is
// unavailable, the limiter decides under its failure policy, as it does
// for a server's middleware: by default each replica spends its share of
// the budget in local memory (see docs/outbound.md).
//
// A Budget is safe for concurrent use. On a Redis-backed limiter it starts
// one goroutine, which reads the limits the fleet learned and which
// [Budget.Close] stops (the limiter's token leases have theirs, which
// [core.Limiter.Close] stops).
package outbound
