//go:build !race

package replay_test

// raceEnabled reports whether the tests run under the race detector, which
// makes memory-heavy tests slow enough that they shrink their workload.
const raceEnabled = false
