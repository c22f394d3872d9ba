package fiberv3limit

import (
	"net"
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/utils/v2"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// request is the keyfunc.Request view of a fiber.Ctx. fiber.Ctx is an
// interface, but its value is almost always a *fiber.DefaultCtx: the view
// then holds that single pointer, and passing it as an interface does not
// allocate. Apps made with fiber.NewWithCustomCtx get a view of the
// interface, which costs one small allocation (see view).
//
// The strings it returns share fiber's request buffers and are valid only
// until the handler returns; keyfunc's extractors copy what they keep.
type request[C fiber.Ctx] struct{ c C }

// view returns the keyfunc.Request view of c.
func view(c fiber.Ctx) keyfunc.Request {
	if d, ok := c.(*fiber.DefaultCtx); ok {
		return request[*fiber.DefaultCtx]{d}
	}
	return request[fiber.Ctx]{c}
}

// native is the framework's request behind the view a policy is given.
func native(r keyfunc.Request) fiber.Ctx { return r.(policy.Native[fiber.Ctx]).Native() }

func (req request[C]) Header(name string) string {
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
func (req request[C]) RemoteAddr() string {
	addr := req.c.RequestCtx().RemoteAddr()
	if tcp, ok := addr.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(tcp.IP); ok {
			return ip.Unmap().String()
		}
	}
	return addr.String()
}

func (req request[C]) Method() string { return req.c.Method() }

// Route is the matched route's path, including any group prefix, once the
// router has matched the request's own route; "" in a Use handler, which
// matches a path prefix and runs before the request's route is known.
func (req request[C]) Route() string {
	if !req.c.Matched() {
		return ""
	}
	return req.c.FullPath()
}

// Value looks in the context's locals, then in its context.
func (req request[C]) Value(key any) any {
	if v := req.c.Locals(key); v != nil {
		return v
	}
	return req.c.Context().Value(key)
}

// Native is the fiber.Ctx behind the view (see [Key]).
func (req request[C]) Native() fiber.Ctx { return req.c }

// ClientIP is fiber's own client address, for keyfunc.FrameworkClientIP
// only: it follows the app's TrustProxy, TrustProxyConfig and ProxyHeader.
// It is parsed at once and never kept, so fiber's reused buffer is safe to
// read.
func (req request[C]) ClientIP() string { return req.c.IP() }
