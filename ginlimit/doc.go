// Package ginlimit is sluice's rate-limiting middleware for gin
// (github.com/gin-gonic/gin, major version 1).
//
// [New] returns a gin.HandlerFunc that limits requests by a key under a
// [core.Limit], on a [core.Limiter] that any number of middlewares share:
//
//	lim, err := core.New(rdb)
//	// ...
//	r := gin.New()
//	r.Use(ginlimit.New(lim, core.PerMinute(600), keyfunc.Tenant("X-Tenant")))
//	r.GET("/search", ginlimit.New(lim, core.PerSecond(5), keyfunc.IP()), search)
//
// The limiting itself (skip, key, limit choice, cost, decision or wait,
// dry run, header values) is [policy.Policy]'s; this package only adapts gin
// to it.
//
// # Answers
//
// An admitted request gets the rate-limit fields (X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset by default; see [WithHeaders])
// and goes on down the chain. A denied one gets the same fields,
// Retry-After, and 429 Too Many Requests with the status text as a plain-text
// body, unless [WithDenyHandler] says otherwise. A request that cannot be
// decided is recorded with gin.Context.Error and answered 400 Bad Request
// when it has no key (a missing tenant header, say: it is never let through
// unlimited), 503 Service Unavailable when the store is down under
// [core.FailClosed] or the client gave up while waiting, and 500 Internal
// Server Error otherwise, unless [WithErrorHandler] says otherwise. Bodies
// are the status text, or problem details with [WithProblemJSON]; an
// error's text never reaches the client. Denied and failed requests abort
// the chain.
//
// # Charging by the response
//
// With [WithChargeIf] alone, the middleware wraps c.Writer for the rest of
// the chain and settles the request just before gin sends the header, so
// the rate-limit fields describe the bucket after a refund. With
// [WithFinalCost], it settles once the rest of the chain returns, and
// rewrites the fields only if nothing was sent yet. Handlers record a
// final cost with [SetCost] and c.Request.Context().
//
// # Client addresses and proxies
//
// [keyfunc.IP] keys requests by the connection's peer address
// (http.Request.RemoteAddr) and reads no forwarding header unless trusted
// proxies are named with [keyfunc.TrustProxies]. This package never uses
// gin.Context.ClientIP, which by default believes X-Forwarded-For and
// X-Real-IP from any peer, so that any client could choose its own key.
//
// # Routes and buckets
//
// A middleware is one budget per key across every route it guards:
// r.Use(ginlimit.New(lim, core.PerMinute(600), key)) allows 600 a minute
// per key across the engine (or a group, with g.Use), and a middleware in
// one route's handler list counts for that route. gin does not tell a
// middleware which mounted it, so the choice is one option,
// [WithPerRoute]: WithPerRoute(true) counts each route apart, by its
// pattern (gin.Context.FullPath, HEAD counted as GET; requests that match
// no route together). Buckets are named by the limits and that choice,
// never by where the middleware was made (see package policy). Two
// middlewares with the same limits and no scope share their budget; the
// first time both have seen requests on different routes, one warning
// names both and the fix ([WithScope] for each, or WithPerRoute(true)).
//
// # Route keys
//
// [keyfunc.Route] reads gin.Context.FullPath, the matched route's pattern,
// such as "/items/:id". gin matches the route before it runs any handler, so
// route keys work both in Engine.Use and on a route or group. A request that
// matches no route has no pattern: a route key fails with
// [keyfunc.ErrNoKey] and the request is answered 400, not 404. To limit
// such requests together instead, key with
// keyfunc.First(keyfunc.Route(), keyfunc.Static("unmatched")).
//
// # Request-scoped values
//
// [keyfunc.User] and [keyfunc.TenantValue] find values stored with
// gin.Context.Set, then values in the request's context, whether or not the
// engine's ContextWithFallback is set.
//
// # Request context
//
// The request's context flows into the limiter: a client that hangs up
// ends its wait (see [WithWait]) and its Redis call.
package ginlimit
