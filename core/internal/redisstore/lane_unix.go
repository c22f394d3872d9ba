//go:build unix

package redisstore

import (
	"crypto/tls"
	"net"
	"syscall"
)

// alive reports whether c, a connection idle for a while, is still open
// with nothing to read: a look at its socket that does not wait (a peek).
// A close by the server (its idle timeout, a restart) reads as the end of
// the stream; anything unread means the stream is not where the lane left
// it. Either way the connection is not used again.
func alive(c net.Conn) bool {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && ok
}
