//go:build !unix

package redisstore

import "net"

// alive reports whether c, idle for a while, may be used again: without a
// way to look at its socket without waiting, never (it is dialled anew).
func alive(net.Conn) bool { return false }
