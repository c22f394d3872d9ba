//go:build !race

package core

// raceEnabled reports whether the tests run under the race detector, which
// makes memory-heavy tests slow enough that they shrink their workload.
const raceEnabled = false
