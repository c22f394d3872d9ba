package grpclimit

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// canaryPeers returns a peer address a canary at fraction enforces on
// lim under keyfunc.IP, and one it leaves in dry run.
func canaryPeers(t *testing.T, lim *core.Limiter, fraction float64) (in, out string) {
	t.Helper()
	r, err := lim.Prepare(core.PerMinute(1))
	if err == nil {
		r, err = r.WithEnforce(fraction)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; in == "" || out == ""; i++ {
		addr := fmt.Sprintf("203.0.113.%d", i)
		switch {
		case r.Enforced("ip:"+addr) && in == "":
			in = addr
		case !r.Enforced("ip:"+addr) && out == "":
			out = addr
		}
	}
	return in, out
}

// TestEnforceCanary: under WithEnforce, calls from a peer the canary
// enforces are refused with ResourceExhausted once its limit is spent;
// calls and streams from a peer it leaves in dry run are served without
// rate-limit metadata, and the dry-run handler is told each, its
// would-be denials marked DryRun. The enforced peer is never reported.
func TestEnforceCanary(t *testing.T) {
	lim := adaptertest.Frozen(t)
	in, out := canaryPeers(t, lim, 0.5)
	var (
		mu      sync.Mutex
		reports []policy.DryRunReport
	)
	told := func() []policy.DryRunReport {
		mu.Lock()
		defer mu.Unlock()
		return append([]policy.DryRunReport(nil), reports...)
	}
	s := serve(t, New(lim, core.PerMinute(1), keyfunc.IP(), WithEnforce(0.5),
		WithDryRunHandler(func(_ context.Context, r policy.DryRunReport) {
			mu.Lock()
			reports = append(reports, r)
			mu.Unlock()
		})))

	enforced := s.dial(in + ":5000")
	if a := check(t, enforced); a.code != codes.OK || a.field("x-ratelimit-limit") != "1" {
		t.Fatalf("enforced peer, first call: %v, metadata %v; want OK with the limit's fields", a.err, a.header)
	}
	if a := check(t, enforced); a.code != codes.ResourceExhausted || a.field("retry-after") != "60" {
		t.Fatalf("enforced peer, second call: %v, metadata %v; want ResourceExhausted, retry-after 60", a.err, a.header)
	}
	if r := told(); len(r) != 0 {
		t.Fatalf("the enforced peer was reported: %+v", r)
	}

	dry := s.dial(out + ":5000")
	for i := range 2 {
		if a := check(t, dry); a.code != codes.OK || a.field("x-ratelimit-limit") != "" || a.field("retry-after") != "" {
			t.Fatalf("dry-run peer, call %d: %v, metadata %v; want OK without rate-limit fields", i+1, a.err, a.header)
		}
	}
	if a := watch(t, dry); a.code != codes.OK || a.field("x-ratelimit-limit") != "" {
		t.Fatalf("dry-run peer, stream: %v, metadata %v; want OK without rate-limit fields", a.err, a.header)
	}
	r := told()
	if len(r) != 3 {
		t.Fatalf("the dry-run handler was told %d times, want 3: %+v", len(r), r)
	}
	for i, want := range []bool{true, false, false} {
		if r[i].Key != "ip:"+out || r[i].Result.Allowed != want || !r[i].Result.DryRun || r[i].Err != nil {
			t.Errorf("report %d: %+v, want key %q, Allowed %v, DryRun", i+1, r[i], "ip:"+out, want)
		}
	}
	if got := s.handled.Load(); got != 4 {
		t.Errorf("%d calls reached the service, want 4 (all but the enforced peer's refused one)", got)
	}
}

// TestShadowLimits: a shadow limit changes no call's answer nor its
// metadata, and the deny handler sees its verdict.
func TestShadowLimits(t *testing.T) {
	lim := adaptertest.Frozen(t)
	var mu sync.Mutex
	var shadowDenied []bool
	s := serve(t, New(lim, core.PerMinute(2), keyfunc.IP(), WithShadowLimits(core.PerMinute(1).WithName("lower")),
		WithDenyHandler(func(ctx context.Context, res core.Result) error {
			mu.Lock()
			shadowDenied = append(shadowDenied, res.Shadow.Denied(0))
			mu.Unlock()
			return status.Error(codes.ResourceExhausted, "slow down")
		})))
	c := s.dial("203.0.113.9:5000")
	for i, want := range []struct {
		code      codes.Code
		remaining string
	}{{codes.OK, "1"}, {codes.OK, "0"}, {codes.ResourceExhausted, "0"}} {
		a := check(t, c)
		if a.code != want.code || a.field("x-ratelimit-limit") != "2" || a.field("x-ratelimit-remaining") != want.remaining {
			t.Fatalf("call %d: %v, metadata %v; want %v, limit 2, remaining %s", i+1, a.err, a.header, want.code, want.remaining)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(shadowDenied) != "[true]" {
		t.Fatalf("the deny handler saw the shadow limit deny %v, want [true]", shadowDenied)
	}
}
