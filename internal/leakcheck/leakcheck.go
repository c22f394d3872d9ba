// Package leakcheck finds goroutines that sluice's code left running after
// a package's tests: goroutines with a frame in a package under
// github.com/sluicehq/sluice/, or started from one.
//
// It takes the place of go.uber.org/goleak in the tests of the packages a
// user imports, with the standard library alone, so that those tests add
// nothing to the user's module graph. It looks only at sluice's own
// goroutines: those of other code (the runtime, go-redis's pools, the
// testing package) are not its business, while a goroutine that sluice
// started shows up whatever it runs now, through its "created by" line.
//
// Use [Main] from a TestMain that needs nothing else:
//
//	func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }
//
// or call [Check] after closing what the tests shared, or at the end of a
// test that must leave nothing behind.
package leakcheck

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

const (
	// modulePrefix starts the name of every function of sluice's packages.
	modulePrefix = "github.com/sluicehq/sluice/"
	// selfPrefix starts the names of this package's functions, which are
	// not leaks (outside its own tests).
	selfPrefix = modulePrefix + "internal/leakcheck."
	// timeout is how long Check waits for goroutines to end.
	timeout = 5 * time.Second
)

// Main runs m's tests, then [Check] if they passed, and returns the exit
// code for os.Exit: m.Run's, or 1 when the tests passed but left
// goroutines, whose stacks it prints to standard error.
func Main(m *testing.M) int {
	code := m.Run()
	if code != 0 {
		return code
	}
	if err := Check(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// Check waits up to about 5 seconds until no goroutine other than the
// caller's has a frame in sluice's packages or was started from one, and
// returns nil then. Otherwise it returns an error holding the stacks of
// those goroutines.
//
// Goroutines that run a test (under testing's test runner) or the tests'
// main function are not counted, so Check may be called at the end of a
// test while other tests run; the caller's own goroutine is never
// counted. Check is safe for concurrent use.
func Check() error { return check(timeout) }

// check is Check with the time to wait as a parameter, for tests.
func check(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	delay := time.Millisecond
	for {
		leaks := leaked()
		if len(leaks) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leakcheck: %d goroutine(s) of sluice still running after %v:\n\n%s",
				len(leaks), wait, strings.Join(leaks, "\n\n"))
		}
		time.Sleep(delay) // polling for a condition, with a deadline
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// leaked returns the stacks of the goroutines that count as leaks now.
func leaked() []string {
	var leaks []string
	for i, g := range goroutines() {
		if i == 0 { // runtime.Stack puts the caller's goroutine first
			continue
		}
		if counts(g) {
			leaks = append(leaks, g)
		}
	}
	return leaks
}

// goroutines returns the stack of every goroutine, the caller's first.
func goroutines() []string {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []string
	for _, g := range bytes.Split(bytes.TrimSpace(buf), []byte("\n\n")) {
		gs = append(gs, string(g))
	}
	return gs
}

// counts reports whether the goroutine whose stack is g is sluice's and
// not a test's: a function of sluice (other than this package's) is on
// its stack or started it, and neither the test runner nor the tests'
// main function is. A stack that cannot be read counts, so that a change
// of format fails loudly rather than hiding leaks.
func counts(g string) bool {
	frames, ok := functions(g)
	if !ok {
		return true
	}
	ours := false
	for _, f := range frames {
		switch {
		case f.name == "testing.tRunner" || f.name == "testing.(*M).Run" || f.name == "main.main":
			return false
		case strings.HasPrefix(f.name, selfPrefix) && !strings.HasSuffix(f.file, "_test.go"):
			// This package at work, on the caller's behalf.
		case strings.HasPrefix(f.name, modulePrefix):
			ours = true
		}
	}
	return ours
}

// frame is one function on a goroutine's stack, or the one that started it.
type frame struct {
	name string // package path and function, without arguments
	file string // its source file; "" if not shown
}

// functions lists the functions in stack g, as runtime.Stack formats it:
// a "goroutine N [state]:" line, then for each frame a line naming the
// function (with its arguments) and a tab-indented line with its file and
// line, and last, for any goroutine but the main one, "created by F in
// goroutine M" and its file. It reports false if g does not start as a
// goroutine's stack does.
func functions(g string) ([]frame, bool) {
	lines := strings.Split(g, "\n")
	if !strings.HasPrefix(lines[0], "goroutine ") {
		return nil, false
	}
	var frames []frame
	for i := 1; i < len(lines); i++ {
		l := lines[i]
		if l == "" || strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "...") {
			continue // a file line, or "...additional frames elided..."
		}
		name := strings.TrimPrefix(l, "created by ")
		if j := strings.Index(name, " in goroutine "); j >= 0 {
			name = name[:j]
		}
		f := frame{name: trimArgs(name)}
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "\t") {
			// "\t/path/file.go:123 +0x1d"
			file, _, _ := strings.Cut(strings.TrimPrefix(lines[i+1], "\t"), " +0x")
			if j := strings.LastIndexByte(file, ':'); j >= 0 {
				file = file[:j]
			}
			f.file = file
		}
		frames = append(frames, f)
	}
	return frames, true
}

// trimArgs removes the argument list from a frame's function line: the
// last parenthesized group, as in "pkg.(*T).m(0xc000010000, ...)".
func trimArgs(l string) string {
	if !strings.HasSuffix(l, ")") {
		return l
	}
	depth := 0
	for i := len(l) - 1; i >= 0; i-- {
		switch l[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				return l[:i]
			}
		}
	}
	return l
}
