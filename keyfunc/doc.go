// Package keyfunc turns HTTP requests into rate-limit keys.
//
// A key names the bucket a request draws from. Each extractor in this
// package is a [Func] that reads a small, framework-neutral [Request]: the
// adapter packages (httplimit, ginlimit, echolimit and fiberlimit) implement
// Request over their framework's request, and the limiter only ever sees the
// resulting string. The same extractor therefore gives the same key in every
// framework.
//
//	keyfunc.IP()                   // "ip:203.0.113.7"
//	keyfunc.TenantValue(tenantKey) // "tenant:acme"
//	keyfunc.Join(keyfunc.User(userKey), keyfunc.Route())
//	// "user:42|route:GET /search"
//
// # Keys
//
// Every key begins with the dimension it came from: "ip:", "tenant:",
// "user:", "route:", "header:" or "static:". Inside a value, '|' and '\'
// are escaped with a backslash ("a|b" becomes "a\|b"), so that [Join] can
// separate parts with '|' and two requests with different parts never share
// a joined key. Keys are built from copies, never from the request's own
// memory.
//
// # Missing keys
//
// A request without a key, such as one lacking a tenant header, fails with
// [ErrNoKey], and adapters answer it with 400 Bad Request by default instead
// of letting it through unlimited. To fall back to another key, say so with
// [First]:
//
//	keyfunc.First(keyfunc.TenantValue(tenantKey), keyfunc.IP())
//
// # Client-controlled values
//
// [Header] and [Tenant] read values the client writes. A client that sends a
// different value with every request gets a fresh bucket every time, so use
// them only behind a gateway that sets or overwrites the field, or join them
// with a key the client cannot choose. Values stored by authentication
// middleware, read with [TenantValue] and [User], do not have this problem.
//
// # Deploying behind proxies
//
// Headers such as X-Forwarded-For and X-Real-IP are text that anyone can
// send. A limiter that keys on them as they arrive lets every client choose
// its own address and so escape its limit. [IP] therefore uses only the
// connection's peer address unless told otherwise. Run behind a load
// balancer or proxy with that default and every client shares the proxy's
// address, and thus one bucket; IP logs a warning the first time it sees a
// forwarding header it is ignoring.
//
// To read the client address through proxies, name the proxies:
//
//	keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"))
//
// For a request from a trusted peer, IP then reads X-Forwarded-For from the
// right. Each proxy appends the address it received the request from, so the
// entries on the right were written by trusted hops and those further left
// by whoever sent the request. IP skips entries that are trusted proxies and
// stops at the first that is not: that is the client. If every entry is
// trusted, the leftmost one is the client. If it meets an entry that is not
// an address, it stops and uses the trusted hop that wrote it (the entry just
// to its right, or the peer). Requests from a peer that is not trusted are
// keyed by the peer, whatever headers they carry. The Forwarded header of
// RFC 7239 is not read.
//
// When the proxy writes the client into a single-address header instead,
// such as X-Real-IP or CF-Connecting-IP, use [TrustHeader] with
// [TrustProxies]. If a trusted peer leaves that header empty or unparsable,
// the peer address is used.
//
// Which prefixes to trust:
//
//   - A cloud load balancer: the subnets its nodes live in, as published by
//     the provider or shown in your VPC.
//   - A Kubernetes ingress controller: the peer is the controller's pod, so
//     trust the cluster's pod CIDR. Also trust whatever sits in front of
//     the controller if it forwards X-Forwarded-For, and check that the
//     controller appends its peer to the header (or replaces the header)
//     rather than passing on what the client sent.
//   - A reverse proxy on the same host: its loopback address, "127.0.0.1"
//     or "::1".
//
// Any host inside a trusted prefix can claim to forward for any client, so
// trust only the proxies, never a range that also holds clients. For ranges
// read from configuration, parse them with [ParseProxies] and pass them with
// [TrustPrefixes], which never panics.
//
// Do not build on the client-IP helpers of gin (Context.ClientIP) or echo
// (Context.RealIP) unless you have configured their trusted proxies: by
// default they believe forwarding headers from any peer, which is exactly
// the spoofing described above. IP behaves the same in every adapter.
//
// # IPv6
//
// One IPv6 host or customer usually holds at least a /64, billions of
// addresses, and can switch between them freely. IP therefore keys IPv6
// clients by their /64 ("ip:2001:db8:1:2::/64"); [IPv6Prefix] changes this.
// IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) are keyed as the IPv4
// address they carry, and zones are dropped.
package keyfunc
