//go:build unix

package redistest

import (
	"errors"
	"syscall"
	"testing"
)

func TestCleanupReapsProcess(t *testing.T) {
	var pid int
	t.Run("inner", func(t *testing.T) {
		s := Start(t)
		pid = s.pid()
	})
	if pid == 0 {
		t.Skip("inner test did not start a server")
	}
	// After the subtest's cleanup the process must be gone and reaped: a
	// zombie would still accept signal 0.
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("kill(%d, 0) after cleanup = %v, want ESRCH", pid, err)
	}
}
