//go:build race

package compat

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = true
