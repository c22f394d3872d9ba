package ginlimit

import (
	"strings"

	"github.com/gin-gonic/gin"
)

// request is the keyfunc.Request view of a *gin.Context. It holds a single
// pointer, so passing it as an interface does not allocate.
type request struct{ c *gin.Context }

func (req request) Header(name string) string {
	vals := req.c.Request.Header.Values(name)
	switch len(vals) {
	case 0:
		return ""
	case 1:
		return vals[0]
	}
	return strings.Join(vals, ", ")
}

// RemoteAddr is the connection's peer, never gin's ClientIP.
func (req request) RemoteAddr() string { return req.c.Request.RemoteAddr }
func (req request) Method() string     { return req.c.Request.Method }
func (req request) Route() string      { return req.c.FullPath() }

// Value looks in the context's keys, then in the request's context.
func (req request) Value(key any) any {
	if v, ok := req.c.Get(key); ok {
		return v
	}
	return req.c.Request.Context().Value(key)
}

// Native is the *gin.Context behind the view (see [Key]).
func (req request) Native() *gin.Context { return req.c }

// ClientIP is gin's own client address, for keyfunc.FrameworkClientIP
// only: it follows the engine's trusted proxies (SetTrustedProxies).
func (req request) ClientIP() string { return req.c.ClientIP() }
