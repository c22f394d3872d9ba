package echov5limit

import (
	"strings"

	"github.com/labstack/echo/v5"
)

// request is the keyfunc.Request view of an *echo.Context. It holds a
// single pointer, so passing it as an interface does not allocate.
type request struct{ c *echo.Context }

func (req request) Header(name string) string {
	vals := req.c.Request().Header.Values(name)
	switch len(vals) {
	case 0:
		return ""
	case 1:
		return vals[0]
	}
	return strings.Join(vals, ", ")
}

// RemoteAddr is the connection's peer, never echo's RealIP.
func (req request) RemoteAddr() string { return req.c.Request().RemoteAddr }
func (req request) Method() string     { return req.c.Request().Method }
func (req request) Route() string      { return req.c.Path() }

// Value looks in the context's store for string keys, then in the request's
// context.
func (req request) Value(key any) any {
	if s, ok := key.(string); ok {
		if v := req.c.Get(s); v != nil {
			return v
		}
	}
	return req.c.Request().Context().Value(key)
}

// Native is the *echo.Context behind the view (see [Key]).
func (req request) Native() *echo.Context { return req.c }

// ClientIP is echo's own client address, for keyfunc.FrameworkClientIP
// only: it follows the app's IPExtractor.
func (req request) ClientIP() string { return req.c.RealIP() }
