package sluiceprom

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/core"
)

// TestDenyList: a refusal by a deny list is counted as a denial of source
// deny_list, without a limit.
func TestDenyList(t *testing.T) {
	c, _ := newTest(t)
	c.ObserveDecision(core.Result{}, core.SourceDenyList)
	c.ObserveDecision(core.Result{DryRun: true}, core.SourceDenyList)
	for _, dry := range []string{"false", "true"} {
		if got := testutil.ToFloat64(c.decisions.WithLabelValues("denied", "deny_list", "", dry)); got != 1 {
			t.Errorf("sluice_decisions_total{outcome=denied,source=deny_list,dry_run=%s} = %v, want 1", dry, got)
		}
	}
}
