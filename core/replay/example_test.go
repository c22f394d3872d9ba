package replay_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/sluicehq/sluice/core/replay"
)

// Replay a short log under the limit in force and a tighter one.
func Example() {
	log := `{"time":"2026-11-28T22:00:00.000000Z","key":"ip:203.0.113.7","allowed":true}
{"time":"2026-11-28T22:00:00.100000Z","key":"ip:203.0.113.7","allowed":true}
{"time":"2026-11-28T22:00:00.200000Z","key":"ip:203.0.113.7","allowed":true}
{"time":"2026-11-28T22:00:00.300000Z","key":"ip:198.51.100.1","allowed":true}
this line is not an event
{"time":"2026-11-28T22:00:00.400000Z","key":"ip:203.0.113.7","allowed":true}
`
	limits := `current  key  5/s
tighter  key  2/s
`
	events, err := replay.Read(strings.NewReader(log), func(b replay.BadLine) { fmt.Println("skipped", b) })
	if err != nil {
		panic(err)
	}
	rules, err := replay.ParseRules(strings.NewReader(limits))
	if err != nil {
		panic(err)
	}
	replay.Sort(events)
	o := replay.Options{Top: 1, DenyAtMost: 0.25}
	reports, err := replay.Simulate(events, rules, o)
	if err != nil {
		panic(err)
	}
	replay.Print(os.Stdout, reports, o)
	// Output:
	// skipped line 5: not JSON: invalid character 'h' in literal true (expecting 'r') (at byte 2)
	// rule current: 5 events, 5 admitted, 0 denied (0.00%)
	//   recorded decisions: 5, the same in the replay: 5
	//   5/1s burst 5: 0 denied
	//     smallest alone denying at most 25%: 3/1s burst 3 (denies 0)
	// rule tighter: 5 events, 3 admitted, 2 denied (40.00%)
	//   recorded decisions: 5, the same in the replay: 3
	//   2/1s burst 2: 2 denied, first at 2026-11-28T22:00:00.200000Z (ip:203.0.113.7)
	//          2  ip:203.0.113.7
	//     smallest alone denying at most 25%: 3/1s burst 3 (denies 0)
}
