package bench

import "syscall"

// childAttr makes the kernel kill the child when this process dies, so an
// interrupted run leaves no redis-server behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
