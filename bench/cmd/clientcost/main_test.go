package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadStrace reads a table as strace -c prints it: rows with and
// without an errors column, and the total row left out.
func TestReadStrace(t *testing.T) {
	const table = `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ------------------
 36.49    3.235300      808825         4         1 waitid
  1.87    0.166038           9     18239      5936 read
  1.75    0.154870          25      6170           write
  0.00    0.000000           0         2           epoll_ctl
------ ----------- ----------- --------- --------- ------------------
100.00    8.866112         305     29047      6325 total
`
	path := filepath.Join(t.TempDir(), "strace.txt")
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readStrace(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"waitid": 4, "read": 18239, "write": 6170, "epoll_ctl": 2}
	if len(got) != len(want) {
		t.Fatalf("read %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d calls, want %d", k, got[k], v)
		}
	}
	if _, err := readStrace(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing table was read")
	}
}

// TestSyscallText checks the per-decision summary: the total first, then
// each call from the most frequent, rare ones counted in the total only.
func TestSyscallText(t *testing.T) {
	got := syscallText(map[string]float64{"write": 1, "read": 1.5, "futex": 0.001})
	if want := "2.50: read 1.50 write 1.00"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestParseCosts reads a small dump in callgrind's format: compressed
// positions, a call's inclusive cost left out, trailing zeros, and costs
// of another object summed under "?".
func TestParseCosts(t *testing.T) {
	const dump = `version: 1
positions: instr line
events: Ir ILmr DLmr

ob=(1) /bin/child
fn=(1) f
0x1000 10 5 1 1
+4 * 3
calls=2 0x2000 20
+2 11 400 9 9
+2 * 1 0 2
fn=(2) g
0x2000 20 7 1
ob=(2) /lib/other.so
fn=(3) h
0x1004 1 100 50
ob=(1)
fn=(2)
0x2004 21 1
`
	syms := []symbol{{0x1000, 0x1010, "main.f"}, {0x2000, 0x2010, "github.com/sluicehq/sluice/core.g"}}
	c, err := parseCosts(strings.NewReader(dump), "/bin/child", syms)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{"main.f": {9, 1, 3}, "github.com/sluicehq/sluice/core.g": {8, 1, 0}, "?": {100, 50, 0}}
	if len(c.byFn) != len(want) {
		t.Fatalf("functions %v, want %v", c.byFn, want)
	}
	for fn, v := range want {
		if !slices.Equal(c.byFn[fn], v) {
			t.Errorf("%s: %v, want %v", fn, c.byFn[fn], v)
		}
	}
	if got := c.event("", "ILmr", "DLmr"); got != 55 {
		t.Errorf("ILmr and DLmr in all: %d, want 55", got)
	}
	if got := groupOf("github.com/sluicehq/sluice/core.g"); got != "sluice" {
		t.Errorf("group of core.g: %q", got)
	}
	if got := groupOf("github.com/sluicehq/sluice/bench.(*sluice).Allow"); got != "harness" {
		t.Errorf("group of the bench package: %q", got)
	}
	top := 1
	coldTop = &top
	t.Cleanup(func() { coldTop = nil })
	report := coldReport(c, 1)
	if want := "sluice 1, the rest 50\n  - github.com/sluicehq/sluice/core.g: 1.0 lines, 8 instructions"; !strings.Contains(report, want) {
		t.Errorf("report %q lacks %q", report, want)
	}
	for _, bad := range []string{"positions: line\n", "events: Ir\nob=(1) /bin/child\n0x10 1 x\n", "ob=(1) /bin/child\n0x10 1 1\n"} {
		if _, err := parseCosts(strings.NewReader(bad), "/bin/child", syms); err == nil {
			t.Errorf("parsed %q without an error", bad)
		}
	}
}
