// Package grpclimit is sluice's rate limiting for gRPC servers
// (google.golang.org/grpc, major version 1): unary and stream server interceptors that
// share their limits, through Redis, with every replica and with the HTTP
// adapters.
//
// [New] returns an [Interceptor] that limits calls by a key under a
// [core.Limit], on a [core.Limiter] that any number of middlewares share.
// Its unary and stream interceptors draw on the same buckets for a method:
//
//	lim, err := core.New(rdb)
//	// ...
//	perClient := grpclimit.New(lim, core.PerMinute(600), keyfunc.IP())
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(perClient.Unary()),
//		grpc.ChainStreamInterceptor(perClient.Stream()),
//	)
//
// An Interceptor is one budget per key across every method of the server
// it is installed on, named by the limits, never by where the Interceptor
// was made (see package policy): every replica, of every build, counts a
// key's calls in the same buckets. WithPerRoute(true) counts each method
// apart, by its full method ("/pkg.Service/Method", the route of a call);
// calls made outside a server (through [Interceptor.Limit] with no method
// in the context) then count in one scope together. [WithScope] names the
// budget, to share it between Interceptors or keep two apart.
//
// The limiting itself (skip, key, limit choice, cost, decision or wait,
// dry run, field values) is [policy.Policy]'s; this package only adapts
// gRPC to it. [Interceptor.Limit] also makes an Interceptor a Limiter of
// go-grpc-middleware's ratelimit interceptors.
//
// # Answers
//
// An admitted call gets the rate-limit fields as response header metadata,
// under lower-case names (x-ratelimit-limit, x-ratelimit-remaining and
// x-ratelimit-reset by default; see [WithHeaders]), and goes on to its
// handler. A denied call gets the same metadata and retry-after, and fails
// with codes.ResourceExhausted, whose status carries a google.rpc.RetryInfo
// detail (errdetails.RetryInfo) with the exact delay before the same call
// could be admitted (in whole seconds and later, as retry-after is, when
// [WithRetryJitter] spreads clients out), unless [WithDenyHandler] says
// otherwise. Clients read the metadata with grpc.Header, also on a failed
// call, and the detail with status.FromError and Status.Details.
//
// Several interceptors on one call each add their fields: a field then
// holds one value per interceptor that decided, outermost first (HTTP
// responses keep the innermost's). To check several limits on one key and
// report the tightest, give one Interceptor [WithLimits] instead.
//
// A call that cannot be decided fails, unless [WithErrorHandler] says
// otherwise, with codes.InvalidArgument when it has no key (missing
// metadata, say: it is never let through unlimited), codes.PermissionDenied
// when its key or address is on a deny list ([WithDeny], [WithOverrides];
// the error wraps [policy.ErrDenyList]), codes.Unavailable when
// the store is down under [core.FailClosed], codes.DeadlineExceeded or
// codes.Canceled when the call's own deadline or cancellation came first
// (that is not a store failure), and codes.Internal otherwise. Status
// messages are fixed texts; an error's text never reaches the client.
//
// A stream is decided once, when it opens; its messages are not counted.
// Use [WithCost] to charge more for the methods that stream.
//
// # Charging by the status code
//
// Every call ends with a status code, and [WithChargeIf] charges a call
// only when its code matches, so that a client is limited in its failed
// calls and not in its successful ones (or the other way round):
//
//	perClient := grpclimit.New(lim, core.PerMinute(20), keyfunc.IP(),
//		grpclimit.WithChargeIf(func(code codes.Code) bool { return code != codes.OK }))
//
// The call's cost is reserved before its handler runs, as any decision
// takes it, and refunded, once and atomically in Redis, when the handler
// returns a code the predicate does not charge; unary calls and streams
// alike, a panic counting as codes.Internal. The metadata describes the
// bucket after the reservation, as it is sent before the handler runs.
//
// # Keys
//
// The request view keyfunc's extractors read is the call:
//
//   - Header is the incoming metadata, matched case-insensitively, so
//     [keyfunc.Tenant]("x-tenant-id") and [keyfunc.Header] read metadata.
//   - RemoteAddr is the peer address from peer.FromContext.
//   - Route is the full method, "/pkg.Service/Method", which gRPC knows
//     before any interceptor runs, and Method is "POST", so
//     [keyfunc.Route] keys a call as "route:POST /pkg.Service/Method".
//   - Value is the call context's value, so [keyfunc.User] and
//     [keyfunc.TenantValue] find what an authentication interceptor that
//     ran before this one stored there.
//
// For anything else, [Key] takes a function of the call's context.
//
// # Client addresses and proxies
//
// [keyfunc.IP] keys calls by the connection's peer and reads no forwarding
// metadata unless trusted proxies are named with [keyfunc.TrustProxies]:
// then x-forwarded-for, which proxies such as Envoy send as metadata, is
// walked from the right exactly as the HTTP adapters walk
// X-Forwarded-For. A server on a Unix socket or an in-memory listener has
// peers without an IP address: keyfunc.IP fails there with
// [keyfunc.ErrNoKey], so key such calls by something else.
//
// # Call context
//
// The call's context flows into the limiter: a client that hangs up or
// whose deadline passes ends its wait (see [WithWait]) and its Redis call.
package grpclimit
