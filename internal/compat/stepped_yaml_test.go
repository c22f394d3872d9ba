package compat

import (
	"fmt"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/sluicehq/sluice/core"
	yaml "go.yaml.in/yaml/v2"
)

// TestSteppedLimitYAML: interval and calendar limits read from YAML as
// text or as a mapping, and from TOML as text, and write back equal.
func TestSteppedLimitYAML(t *testing.T) {
	in := `
default: 1000/calendar-day zone America/New_York
routes:
  /export: {rate: 10, period: 1m, burst: 50, refill: interval}
  /report: {rate: 20000, refill: monthly, zone: Europe/Paris, name: reports}
  /weekly: "5000/calendar-week"
`
	var c config
	if err := yaml.Unmarshal([]byte(in), &c); err != nil {
		t.Fatal(err)
	}
	want := config{Default: core.PerCalendarDay(1000, "America/New_York"), Routes: map[string]core.Limit{
		"/export": core.PerInterval(10, time.Minute).WithBurst(50),
		"/report": core.PerCalendarMonth(20000, "Europe/Paris").WithName("reports"),
		"/weekly": core.PerCalendarWeek(5000, ""),
	}}
	if fmt.Sprint(c) != fmt.Sprint(want) {
		t.Fatalf("decoded %v, want %v", c, want)
	}
	out, err := yaml.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var back config
	if err := yaml.Unmarshal(out, &back); err != nil || fmt.Sprint(back) != fmt.Sprint(want) {
		t.Errorf("round trip through\n%s: %v, %v", out, back, err)
	}
	var l core.Limit
	if err := yaml.Unmarshal([]byte("{rate: 5, refill: daily, zone: Atlantis/Capital}"), &l); err == nil {
		t.Errorf("a bad zone in YAML: %v, want an error", l)
	}

	tout, err := toml.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var tback config
	if err := toml.Unmarshal(tout, &tback); err != nil || fmt.Sprint(tback) != fmt.Sprint(want) {
		t.Errorf("round trip through TOML\n%s: %v, %v", tout, tback, err)
	}
}
