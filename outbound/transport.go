package outbound

import (
	"context"
	"io"
	"net/http"
	"time"
)

// Learn applies what a response of status with header h said of key's
// upstream (see the package doc): a lower limit from now on, a pause of
// every replica's calls. Transports call it for each response; call it
// for responses you read another way. It returns the pause it applied
// (0 for none) and the error of writing it to Redis, if any.
func (b *Budget) Learn(ctx context.Context, key string, status int, h http.Header) (time.Duration, error) {
	a := readAdvice(status, h, time.Now(), b.o.maxPause, &b.policies)
	if a.policy.Rate > 0 || a.burst > 0 {
		b.learn(ctx, key, b.announced(a))
	}
	if a.pause <= 0 {
		return 0, nil
	}
	return a.pause, b.Pause(ctx, key, a.pause)
}

// Transport returns an [http.RoundTripper] that takes each request's call
// from the budget under the key key returns for it, sends it through next
// (http.DefaultTransport if nil), and learns from the response (see
// [Budget.Learn]). A request the budget refuses is not sent: RoundTrip
// returns an error wrapping [ErrLimited] (an http.Client wraps it in a
// *url.Error, which errors.Is and errors.As see through). A key function
// that fails fails the request, unsent. With [WithRetry], a 429 or 503
// that asked for a pause is sent again after it.
//
// The transport is safe for concurrent use, as next must be.
func (b *Budget) Transport(key KeyFunc, next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{b: b, key: key, next: next}
}

type transport struct {
	b    *Budget
	key  KeyFunc
	next http.RoundTripper
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	key, err := t.key(r)
	if err != nil {
		closeBody(r)
		return nil, err
	}
	ctx := r.Context()
	for attempt := 0; ; attempt++ {
		if err := t.b.Take(ctx, key); err != nil {
			closeBody(r)
			return nil, err
		}
		resp, err := t.next.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		pause, _ := t.b.Learn(ctx, key, resp.StatusCode, resp.Header)
		if pause <= 0 || attempt >= t.b.o.retries || !retryable(resp.StatusCode) || tooLate(ctx, pause) {
			return resp, nil
		}
		again, ok := rewind(r)
		if !ok {
			return resp, nil
		}
		// The retry waits for the pause in Take; the response it replaces
		// is drained so that its connection can be used again.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		r = again
	}
}

func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

// rewind returns r ready to be sent again, with a fresh body.
func rewind(r *http.Request) (*http.Request, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return r, true
	}
	if r.GetBody == nil {
		return nil, false
	}
	body, err := r.GetBody()
	if err != nil {
		return nil, false
	}
	again := r.Clone(r.Context())
	again.Body = body
	return again, true
}

// closeBody closes the body of a request that is not sent, as a
// RoundTripper must.
func closeBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}
