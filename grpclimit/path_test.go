package grpclimit

import (
	"testing"

	"github.com/sluicehq/sluice/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
	"google.golang.org/grpc/codes"
)

// TestPath: a path of keys (WithPath) through the interceptor: two peers,
// two users of one organisation. The first user's denial names the user
// level and charges the organisation nothing, so the second user still
// gets the organisation's last request before the organisation denies.
func TestPath(t *testing.T) {
	s := serve(t, New(adaptertest.Frozen(t), core.PerMinute(3), keyfunc.Static("org:acme"),
		WithHeaders(policy.HeadersIETF),
		WithPath("org", policy.PathLevel{Name: "user", Key: keyfunc.IP(), Limits: []core.Limit{core.PerMinute(2)}})))
	a, b := s.dial("203.0.113.7:5000"), s.dial("198.51.100.7:5000")
	for i, st := range []struct {
		who       string
		code      codes.Code
		rateLimit string
	}{
		{"a", codes.OK, `"user.2/m";r=1;t=30`},
		{"a", codes.OK, `"user.2/m";r=0;t=30`},
		{"a", codes.ResourceExhausted, `"user.2/m";r=0;t=30`},
		{"b", codes.OK, `"org.3/m";r=0;t=20`},
		{"b", codes.ResourceExhausted, `"org.3/m";r=0;t=20`},
	} {
		c := a
		if st.who == "b" {
			c = b
		}
		got := check(t, c)
		if got.code != st.code || got.field("ratelimit") != st.rateLimit {
			t.Errorf("call %d by %s: %v, ratelimit %q; want %v, %q", i+1, st.who, got.err, got.field("ratelimit"), st.code, st.rateLimit)
		}
	}
	if got := s.handled.Load(); got != 3 {
		t.Errorf("%d calls reached the service, want 3", got)
	}
}
