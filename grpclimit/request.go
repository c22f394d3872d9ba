package grpclimit

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// call is the keyfunc.Request view of one gRPC call: its context and full
// method. The view is a pointer to it, which costs one small allocation
// per call, next to the dozens gRPC itself makes.
type call struct {
	ctx    context.Context
	method string // "/pkg.Service/Method"; "" when unknown
}

// Header returns the call's incoming metadata under name, matched
// case-insensitively (gRPC sends keys in lower case), with several values
// joined by ", ". Proxies in front of gRPC servers send X-Forwarded-For as
// metadata, which keyfunc.IP reads when proxies are trusted.
func (c *call) Header(name string) string {
	vals := metadata.ValueFromIncomingContext(c.ctx, name)
	switch len(vals) {
	case 0:
		return ""
	case 1:
		return vals[0]
	}
	return strings.Join(vals, ", ")
}

// RemoteAddr is the connection's peer, from peer.FromContext: "host:port"
// over TCP, and no IP address over a Unix socket or an in-memory listener.
func (c *call) RemoteAddr() string {
	p, ok := peer.FromContext(c.ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	return p.Addr.String()
}

// Method is POST: every gRPC call is an HTTP/2 POST to its full method, so
// keyfunc.Route keys it as "route:POST /pkg.Service/Method".
func (c *call) Method() string { return "POST" }

// Route is the full method, "/pkg.Service/Method": gRPC knows it before any
// interceptor runs.
func (c *call) Route() string { return c.method }

// Value looks in the call's context, where interceptors that ran before
// this one (authentication, say) store what they found.
func (c *call) Value(key any) any { return c.ctx.Value(key) }

// Native is the call's context behind the view (see [Key]).
func (c *call) Native() context.Context { return c.ctx }
