//go:build linux

package redistest

import "syscall"

// sysProcAttr makes the kernel kill redis-server when the test binary dies
// without running its cleanups, for example after a -timeout panic.
//
// Pdeathsig fires when the OS thread that started the child exits. The Go
// runtime ends a thread only when a goroutine exits while locked to it with
// runtime.LockOSThread, which tests rarely do.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
