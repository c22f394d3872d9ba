package fiberlimit

import (
	"net"
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
)

// request is the keyfunc.Request view of a *fiber.Ctx. It holds a single
// pointer, so passing it as an interface does not allocate.
//
// The strings it returns share fiber's request buffers and are valid only
// until the handler returns; keyfunc's extractors copy what they keep.
type request struct{ c *fiber.Ctx }

func (req request) Header(name string) string {
	vals := req.c.Request().Header.PeekAll(name)
	switch len(vals) {
	case 0:
		return ""
	case 1:
		return utils.UnsafeString(vals[0])
	}
	var b strings.Builder
	for i, v := range vals {
		if i > 0 {
			b.WriteString(", ")
		}
		b.Write(v)
	}
	return b.String()
}

// RemoteAddr is the connection's peer, never fiber's IP, and without the
// port: fasthttp holds the peer as a net.Addr, and formatting its IP alone
// costs one allocation where net.TCPAddr.String costs three.
func (req request) RemoteAddr() string {
	addr := req.c.Context().RemoteAddr()
	if tcp, ok := addr.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(tcp.IP); ok {
			return ip.Unmap().String()
		}
	}
	return addr.String()
}

func (req request) Method() string { return req.c.Method() }

// Route is the matched route's path, or "" when the route at hand is not
// the request's own: fiber's stand-in outside routing (it has no handlers),
// or the route of a Use handler, which matches a path prefix. fiber does
// not say which routes come from Use, so a route without parameters counts
// as the request's own only when its path is the request's path, up to
// case and a trailing slash.
func (req request) Route() string {
	rt := req.c.Route()
	if len(rt.Handlers) == 0 || len(rt.Params) == 0 && !samePath(rt.Path, req.c.Path()) {
		return ""
	}
	return rt.Path
}

// samePath reports whether two paths are equal up to case and a trailing
// slash, as fiber matches them by default.
func samePath(a, b string) bool {
	if len(a) > 1 {
		a = strings.TrimSuffix(a, "/")
	}
	if len(b) > 1 {
		b = strings.TrimSuffix(b, "/")
	}
	return strings.EqualFold(a, b)
}

// Value looks in the context's locals, then in its user context.
func (req request) Value(key any) any {
	if v := req.c.Locals(key); v != nil {
		return v
	}
	return req.c.UserContext().Value(key)
}

// Native is the *fiber.Ctx behind the view (see [Key]).
func (req request) Native() *fiber.Ctx { return req.c }

// ClientIP is fiber's own client address, for keyfunc.FrameworkClientIP
// only: it follows the app's ProxyHeader and trusted proxies. It is parsed
// at once and never kept, so fiber's reused buffer is safe to read.
func (req request) ClientIP() string { return req.c.IP() }
