package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestRun runs the walk-through and checks that its four steps agree:
// the shadow limit's would-be denials, the replay's denials under the
// proposed limit, and the denials once it is enforced are the same
// requests' count; the replay of the limit in force decides every
// recorded request as it was decided; and the canary's denials plus its
// would-be denials add up to the same.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	t.Log("\n" + s)
	one := func(re string) string {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("the output lacks %q", re)
		}
		return m[1]
	}
	shadow := one(`would deny (\d+) \(`)
	replayed := one(`rule proposed: \d+ events, \d+ admitted, (\d+) denied`)
	enforced := one(`Enforce: .*\n\s+denied \(429\): (\d+) `)
	if shadow == "0" || shadow != replayed || shadow != enforced {
		t.Errorf("shadow would deny %s, the replay denies %s, enforcement denies %s: want the same, above 0", shadow, replayed, enforced)
	}
	if n := one(`rule current: (\d+) events`); !strings.Contains(s, "recorded decisions: "+n+", the same in the replay: "+n) {
		t.Errorf("the replay of the limit in force does not decide all %s recorded requests as recorded", n)
	}
	if got := one(`50% of tenants.*\n\s+denied \(429\): (\d+),`); got == "0" {
		t.Errorf("the 50%% canary denied nothing; the walk-through expects it to catch wonka")
	}
}
