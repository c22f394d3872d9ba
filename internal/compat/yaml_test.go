package compat

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/sluicehq/sluice/core"
	yaml "go.yaml.in/yaml/v2"
)

// config is a service configuration as users write it.
type config struct {
	Default core.Limit            `yaml:"default" toml:"default"`
	Routes  map[string]core.Limit `yaml:"routes" toml:"routes"`
}

// TestLimitYAML: limits read from YAML as text or as a map with a string
// period, with the burst defaulting to the rate, and write back equal.
func TestLimitYAML(t *testing.T) {
	in := `
default: 600/m
routes:
  /login: {rate: 5, period: 15m, name: login}
  /search: "10/s burst 3"
  /export: {rate: 2, period: 60000000000}
`
	var c config
	if err := yaml.Unmarshal([]byte(in), &c); err != nil {
		t.Fatal(err)
	}
	want := config{Default: core.PerMinute(600), Routes: map[string]core.Limit{
		"/login":  {Name: "login", Rate: 5, Period: 15 * time.Minute, Burst: 5},
		"/search": core.PerSecond(10).WithBurst(3),
		"/export": core.PerMinute(2),
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
	if err := yaml.Unmarshal([]byte("{rate: 5, period: 1y}"), &l); err == nil || !strings.Contains(err.Error(), `period "1y"`) {
		t.Errorf("a bad period in YAML: %v, want an error naming it", err)
	}
}

// TestLimitTOML: the same through TOML.
func TestLimitTOML(t *testing.T) {
	in := `
default = "600/m"
[routes]
"/search" = "10/s burst 3"
`
	var c config
	if err := toml.Unmarshal([]byte(in), &c); err != nil {
		t.Fatal(err)
	}
	if c.Default != core.PerMinute(600) || c.Routes["/search"] != core.PerSecond(10).WithBurst(3) {
		t.Fatalf("decoded %v", c)
	}
	out, err := toml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back config
	if err := toml.Unmarshal(out, &back); err != nil || fmt.Sprint(back) != fmt.Sprint(c) {
		t.Errorf("round trip through\n%s: %v, %v", out, back, err)
	}
	var l core.Limit
	if err := toml.Unmarshal([]byte(`x = "5/fortnight"`), &struct{ X *core.Limit }{&l}); err == nil || !strings.Contains(err.Error(), "fortnight") {
		t.Errorf("a bad period in TOML: %v, want an error naming it", err)
	}
}
