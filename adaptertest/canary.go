package adaptertest

import (
	"cmp"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// canary is the conformance case of WithEnforce: a tenant the canary
// enforces is denied with 429 as usual; one it leaves in dry run passes
// with no rate-limit field, and the dry-run handler is told the
// would-be denial, marked DryRun. The enforced tenant's requests are
// never reported.
func canary() Scenario {
	const fraction = 0.5
	limit := core.PerMinute(1)
	in, out := canaryTenants(limit, fraction)
	var mu sync.Mutex
	var reports []policy.DryRunReport
	reported := func(want int, key string, allowed bool) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(reports) != want {
				return fmt.Errorf("the dry-run handler was told %d times, want %d", len(reports), want)
			}
			if want == 0 {
				return nil
			}
			r := reports[want-1]
			if r.Key != key || r.Result.Allowed != allowed || !r.Result.DryRun || r.Err != nil {
				return fmt.Errorf("the dry-run handler was told %+v, want key %q, Allowed %v, DryRun", r, key, allowed)
			}
			return nil
		}
	}
	return Scenario{
		Name: "a canary enforces some keys and reports the others' would-be denials",
		Limiter: func(tb testing.TB) *core.Limiter {
			mu.Lock()
			reports = nil // a new run of the scenario
			mu.Unlock()
			return Frozen(tb)
		},
		Use: &Middleware{
			Limit: limit, Key: keyfunc.Tenant("X-Tenant"), Enforce: fraction,
			DryRunReport: func(_ Call, r policy.DryRunReport) {
				mu.Lock()
				reports = append(reports, r)
				mu.Unlock()
			},
		},
		Routes: []Route{{Method: "GET", Pattern: "/items/{id}"}},
		Steps: []Step{
			{Request: req("/items/1", "X-Tenant", in), Want: Want{Status: 200, Header: legacy(1, 0, 60), Body: OK}, Check: reported(0, "", false)},
			{Request: req("/items/1", "X-Tenant", in), Want: Want{Status: 429, Header: map[string]string{"Retry-After": "60"}, Body: tooMany}, Check: reported(0, "", false)},
			{Request: req("/items/1", "X-Tenant", out), Want: Want{Status: 200, Absent: allFields, Body: OK}, Check: reported(1, "tenant:"+out, true)},
			{Request: req("/items/1", "X-Tenant", out), Want: Want{Status: 200, Absent: allFields, Body: OK}, Check: reported(2, "tenant:"+out, false)},
		},
	}
}

// canaryTenants returns a tenant a canary at fraction enforces under
// limit, and one it leaves in dry run, as a limiter without a slot key
// (the scenarios') picks them.
func canaryTenants(limit core.Limit, fraction float64) (in, out string) {
	lim, err := core.NewMemory()
	if err != nil {
		panic(err)
	}
	r, err := lim.Prepare(limit)
	if err == nil {
		r, err = r.WithEnforce(fraction)
	}
	if err != nil {
		panic(err)
	}
	for i := 0; in == "" || out == ""; i++ {
		t := "t" + strconv.Itoa(i)
		if r.Enforced("tenant:" + t) {
			in = cmp.Or(in, t)
		} else {
			out = cmp.Or(out, t)
		}
	}
	return in, out
}
