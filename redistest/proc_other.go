//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns nil: outside Linux there is no portable way to tie the
// child's life to ours, so only the test cleanup stops redis-server.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// favour does nothing here (see proc_linux.go).
func favour(int) {}
