//go:build !linux

package bench

import "syscall"

// ChildAttr returns nil: only Linux can have a child killed with its parent.
func ChildAttr() *syscall.SysProcAttr { return nil }
