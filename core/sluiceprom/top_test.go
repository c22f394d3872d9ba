package sluiceprom

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/core"
)

// TestTopCollector: a limiter keeping K = 2 top talkers of two limits
// exports at most 2 series per limit and kind, the heaviest, with the
// totals and error bounds; hashed keys are labelled "#<hash>", named ones
// by name; a limit over 20 keys never makes more than K series.
func TestTopCollector(t *testing.T) {
	for _, names := range []bool{false, true} {
		lim, err := core.NewMemory(core.WithTopTalkers(core.TopTalkers{K: 2, Names: names}))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		api := core.Limit{Name: "api", Rate: 1, Period: time.Hour, Burst: 1000}
		login := core.Limit{Name: "login", Rate: 1, Period: time.Hour, Burst: 3}
		allow := func(key string, n int, l core.Limit) {
			for range n {
				if _, err := lim.Allow(ctx, key, l); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i := range 20 {
			allow("tenant:"+strconv.Itoa(i), 20-i, api)
		}
		allow("tenant:a", 6, login)
		allow("tenant:b", 4, login)
		allow("tenant:c", 2, login)
		reg := prometheus.NewPedanticRegistry()
		if _, err := NewTop(lim, WithRegisterer(reg)); err != nil {
			t.Fatal(err)
		}
		label := func(k string) string {
			if names {
				return k
			}
			return "#" + core.TopKeyHash(k)
		}
		want := `
# HELP sluice_top_admitted_cost Admitted cost of the keys of largest admitted cost, per limit (at most K keys), over the fleet in the current top-talkers window and the one before.
# TYPE sluice_top_admitted_cost gauge
sluice_top_admitted_cost{key="` + label("tenant:0") + `",limit="api"} 20
sluice_top_admitted_cost{key="` + label("tenant:1") + `",limit="api"} 19
sluice_top_admitted_cost{key="` + label("tenant:a") + `",limit="login"} 3
sluice_top_admitted_cost{key="` + label("tenant:b") + `",limit="login"} 3
# HELP sluice_top_denials Denials of the most denied keys, per limit (at most K keys), over the fleet in the current top-talkers window and the one before.
# TYPE sluice_top_denials gauge
sluice_top_denials{key="` + label("tenant:a") + `",limit="login"} 3
sluice_top_denials{key="` + label("tenant:b") + `",limit="login"} 1
# HELP sluice_top_error Per limit and kind (admitted_cost, denials): every top-talker count is within this of the truth.
# TYPE sluice_top_error gauge
sluice_top_error{kind="admitted_cost",limit="api"} 0
sluice_top_error{kind="admitted_cost",limit="login"} 0
sluice_top_error{kind="denials",limit="api"} 0
sluice_top_error{kind="denials",limit="login"} 0
# HELP sluice_top_total Per limit and kind (admitted_cost, denials): the fleet's total over the windows the top talkers cover.
# TYPE sluice_top_total gauge
sluice_top_total{kind="admitted_cost",limit="api"} 210
sluice_top_total{kind="admitted_cost",limit="login"} 8
sluice_top_total{kind="denials",limit="api"} 0
sluice_top_total{kind="denials",limit="login"} 4
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
			t.Errorf("names %v: %v", names, err)
		}
		if n := testutil.CollectAndCount(mustTop(t, lim), "sluice_top_admitted_cost", "sluice_top_denials"); n > 2*2*2 {
			t.Errorf("%d series for 2 limits, 2 kinds, K = 2", n)
		}
		lim.Close()
	}
	if _, err := NewTop(nil); err == nil {
		t.Error("NewTop(nil): no error")
	}
	lim, _ := core.NewMemory()
	if _, err := NewTop(lim, WithRegisterer(nil), WithConstLabels(prometheus.Labels{"key": "x"})); err == nil {
		t.Error("a constant label named key: no error")
	}
}

func mustTop(t *testing.T, lim *core.Limiter) *TopCollector {
	t.Helper()
	c, err := NewTop(lim, WithRegisterer(nil))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
