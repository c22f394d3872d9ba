package bench

import "syscall"

// ChildAttr returns the attributes of a child process that the kernel kills
// when this process dies, so an interrupted run leaves no fleet worker
// behind. (redistest gives the redis-server from StartRedis the same.)
func ChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
