//go:build linux

package redistest

import (
	"os"
	"syscall"
)

// sysProcAttr makes the kernel kill redis-server when the test binary dies
// without running its cleanups, for example after a -timeout panic.
//
// Pdeathsig fires when the OS thread that started the child exits. The Go
// runtime ends a thread only when a goroutine exits while locked to it with
// runtime.LockOSThread, which tests rarely do.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// favour raises redis-server's scheduling priority (nice -10) when the
// test runs as root, and does nothing otherwise. A test machine runs
// Redis beside the test binary and whatever else loads the machine (CPU
// hogs that stand for noisy neighbours); in production Redis has a host
// of its own. With the priority, a loaded machine slows the client, whose
// pauses the limiter must not blame on Redis, rather than starving the
// server, which would be a real outage.
func favour(pid int) {
	if os.Geteuid() == 0 {
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, pid, -10)
	}
}
