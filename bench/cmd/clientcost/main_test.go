package main

import (
	"os"
	"path/filepath"
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
