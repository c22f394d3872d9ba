package bench

import "syscall"

// ChildAttr returns the attributes of a child process that the kernel kills
// when this process dies, so an interrupted run leaves no redis-server or
// fleet worker behind.
func ChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
