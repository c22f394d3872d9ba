package policy

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestShareErrors: WithShare and WithClass that cannot work are errors of
// New naming what is wrong, the Share's own faults included (as
// core.Limiter.PreparePath finds them).
func TestShareErrors(t *testing.T) {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	k := keyfunc.Header("X")
	path := WithPath[req, struct{}]("upstream", PathLevel{Name: "tenant", Key: k, Limits: []core.Limit{core.PerHour(100)}})
	class := WithClass[req, struct{}](func(keyfunc.Request) (string, error) { return "critical", nil })
	classes := core.Share{Classes: []core.Class{{Name: "critical", Reserve: 0.2}, {Name: "rest"}}}
	for _, tc := range []struct {
		name string
		opts []opt
		want string
	}{
		{"no path", []opt{WithShare[req, struct{}]("upstream", core.Share{Fair: true})}, "WithShare without WithPath"},
		{"unknown level", []opt{path, WithShare[req, struct{}]("org", core.Share{Fair: true})}, `no level of WithPath is named "org"`},
		{"class without share", []opt{path, class}, "WithClass without WithShare"},
		{"class without classes", []opt{path, WithShare[req, struct{}]("upstream", core.Share{Fair: true}), class}, "has no classes"},
		{"weight 0", []opt{path, WithShare[req, struct{}]("upstream", core.Share{Fair: true, Weights: map[string]int{"a": 0}})}, `weighs child "a" 0`},
		{"reserves over 1", []opt{path, WithShare[req, struct{}]("upstream", core.Share{Classes: []core.Class{{Name: "a", Reserve: 0.7}, {Name: "b", Reserve: 0.7}}})}, "more than 1"},
		{"fair at the last level", []opt{path, WithShare[req, struct{}]("tenant", core.Share{Fair: true})}, "no level is below it"},
	} {
		_, _, err := New(lim, core.PerHour(1), k, self, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	if _, _, err := New(lim, core.PerHour(10), k, self, path, WithShare[req, struct{}]("upstream", classes), class); err != nil {
		t.Errorf("a valid share: %v", err)
	}
}
