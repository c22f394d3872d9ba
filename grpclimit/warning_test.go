package grpclimit

import (
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
	"google.golang.org/grpc/codes"
)

// TestWarning: on a real Redis, with WithWarning(0.5) on PerMinute(4),
// unary calls and a stream through one interceptor carry
// x-ratelimit-warning: 50 from the second admission on, in every header
// style; the first admission and the refusal do not. The limiter's
// threshold handler is told once, at the crossing, with the call's key.
func TestWarning(t *testing.T) {
	for _, style := range []policy.HeaderStyle{policy.HeadersLegacy, policy.HeadersIETF, policy.HeadersNone} {
		var events atomic.Int32
		var key atomic.Value
		lim, _ := redisLimiter(t, core.WithThresholdHandler(func(ev core.ThresholdEvent) {
			events.Add(1)
			key.Store(ev.Key)
		}))
		s := serve(t, New(lim, core.PerMinute(4), keyfunc.IP(), WithScope("health"), WithWarning(0.5), WithHeaders(style)))
		c := s.dial("203.0.113.7:5000")
		for i, want := range []struct {
			code    codes.Code
			warning string
			stream  bool
		}{{codes.OK, "", false}, {codes.OK, "50", true}, {codes.OK, "50", false}, {codes.OK, "50", true}, {codes.ResourceExhausted, "", false}} {
			var a answer
			if want.stream {
				a = watch(t, c)
			} else {
				a = check(t, c)
			}
			if a.code != want.code || a.field("x-ratelimit-warning") != want.warning {
				t.Fatalf("style %d, call %d: %v, x-ratelimit-warning %q (metadata %v); want %v, %q", style, i+1, a.err, a.field("x-ratelimit-warning"), a.header, want.code, want.warning)
			}
		}
		if n := events.Load(); n != 1 || key.Load() != "ip:203.0.113.7" {
			t.Fatalf("style %d: %d threshold events (last key %v), want 1 for ip:203.0.113.7", style, n, key.Load())
		}
	}
}
