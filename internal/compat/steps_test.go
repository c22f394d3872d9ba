package compat

// stepsOf returns how many random steps a differential test of n steps
// takes: n, or a quarter of it under the race detector. gopher-lua under
// -race runs these ten times slower (106 s of CI's race run for the
// package, against 10 s without), and the race detector looks for
// unsynchronised access, which the first steps reach as well as the last;
// CI runs the package without -race too, at every step.
func stepsOf(n int) int {
	if raceEnabled {
		return n / 4
	}
	return n
}
