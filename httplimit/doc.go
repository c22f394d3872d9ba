// Package httplimit is sluice's rate-limiting middleware for net/http.
//
// [New] returns a func(http.Handler) http.Handler that limits requests by a
// key under a [core.Limit], on a [core.Limiter] that any number of
// middlewares share:
//
//	lim, err := core.New(rdb)
//	// ...
//	mux := http.NewServeMux()
//	mux.Handle("GET /search", httplimit.New(lim, core.PerSecond(5), keyfunc.IP())(search))
//	http.ListenAndServe(addr, httplimit.New(lim, core.PerMinute(600), keyfunc.Tenant("X-Tenant"))(mux))
//
// The limiting itself (skip, key, limit choice, cost, decision or wait,
// dry run, header values) is [policy.Policy]'s; this package only adapts
// net/http to it.
//
// # Answers
//
// An admitted request gets the rate-limit fields (X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset by default; see [WithHeaders])
// and goes on to the next handler. A denied one gets the same fields,
// Retry-After, and 429 Too Many Requests with the status text as a plain-text
// body, unless [WithDenyHandler] says otherwise. A request that cannot be
// decided is answered 400 Bad Request when it has no key (a missing tenant
// header, say: it is never let through unlimited), 503 Service Unavailable
// when the store is down under [core.FailClosed] or the client gave up while
// waiting, and 500 Internal Server Error otherwise, unless
// [WithErrorHandler] says otherwise. Bodies are the status text, or problem
// details with [WithProblemJSON]; an error's text never reaches the client.
//
// # Client addresses and proxies
//
// [keyfunc.IP] keys requests by the connection's peer address
// (Request.RemoteAddr) and reads no forwarding header unless trusted
// proxies are named with [keyfunc.TrustProxies]. Middleware that rewrites
// RemoteAddr from request headers before this one (chi's RealIP, for one)
// lets every client choose its own key.
//
// # Routes and buckets
//
// A middleware is one budget per key across everything it wraps:
// httplimit.New(...)(mux) around a whole mux allows its limit per key
// across the mux's routes, and a middleware around one route's handler
// counts for that route. net/http does not tell the two apart, so the
// choice is one option, [WithPerRoute] (see package policy's
// documentation): WithPerRoute(true) counts each route apart, by
// Request.Pattern, which http.ServeMux (Go 1.22 and later) sets to the
// matched pattern, such as "GET /items/{id}", before it calls the route's
// handler. A middleware that wraps an *http.ServeMux directly asks the mux
// which pattern it is about to match (http.ServeMux.Handler) and sets
// Request.Pattern to it, as the mux then does itself:
//
//	http.ListenAndServe(addr, httplimit.New(lim, core.PerMinute(600), keyfunc.IP(), httplimit.WithPerRoute(true))(mux))
//
// A middleware around any other handler (another middleware, or a router
// that does not set Request.Pattern, such as gorilla/mux or
// julienschmidt/httprouter) runs where the route is not known: per route,
// it counts all its requests in one scope, route:unmatched, and warns once;
// a [keyfunc.Route] key fails there with [keyfunc.ErrNoKey] (answered
// 400). Under such a router, give a middleware on one route its route with
// [WithRoute], or its own budget with [WithScope]:
//
//	r.Handle("/items/{id}", httplimit.New(lim, limit, keyfunc.IP(), httplimit.WithRoute("GET /items/{id}"))(items))
//
// Two middlewares with the same limits and no scope share their budget;
// the first time both have seen requests on different routes, one warning
// names both and the fix.
//
// # Request context
//
// The request's context flows into the limiter: a client that hangs up
// ends its wait (see [WithWait]) and its Redis call.
package httplimit
