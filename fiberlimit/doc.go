// Package fiberlimit is sluice's rate-limiting middleware for fiber
// (github.com/gofiber/fiber/v2). It supports fiber v2 only; for fiber v3
// use [github.com/sluicehq/sluice/fiberv3limit], which takes the same options.
//
// [New] returns a fiber.Handler that limits requests by a key under a
// [core.Limit], on a [core.Limiter] that any number of middlewares share:
//
//	lim, err := core.New(rdb)
//	// ...
//	app := fiber.New()
//	app.Use(fiberlimit.New(lim, core.PerMinute(600), keyfunc.Tenant("X-Tenant")))
//	app.Get("/items/:id", fiberlimit.New(lim, core.PerSecond(5), keyfunc.Route()), items)
//
// The limiting itself (skip, key, limit choice, cost, decision or wait,
// dry run, header values) is [policy.Policy]'s; this package only adapts
// fiber to it.
//
// # Answers
//
// An admitted request gets the rate-limit fields (X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset by default; see [WithHeaders])
// and goes on to the next handler. A denied one gets the same fields and
// Retry-After, and the middleware returns a *fiber.Error with status 429 Too
// Many Requests, unless [WithDenyHandler] says otherwise: the app's
// ErrorHandler answers it, as it answers every other error, and the fields
// stay on the response. With [WithProblemJSON] the 429 is written directly
// as problem details instead.
//
// A request that cannot be decided makes the middleware return a
// *fiber.Error, unless [WithErrorHandler] says otherwise: 400 Bad Request
// when it has no key (a missing tenant header, say: it is never let through
// unlimited), 503 Service Unavailable when the store is down under
// [core.FailClosed] or the request's context ended while waiting, and 500
// Internal Server Error otherwise. The app's ErrorHandler answers it;
// fiber's default one writes the status text. The error carries only the
// status, because fiber's default error handler sends an error's whole
// text to the client; use [WithErrorHandler] to see the cause. With
// [WithProblemJSON], which fiber's error handler cannot render, failures
// are answered directly with problem details instead.
//
// With [WithConcurrency], a request holds its slot until c.Next returns. A
// handler that streams its answer (c.Context().SetBodyStreamWriter)
// returns before fasthttp writes the body, so the slot is given back
// before the body is sent: the cap counts the handlers' work, not the
// transfer.
//
// # Charging by the response
//
// With [WithChargeIf] or [WithFinalCost], the middleware settles the
// request once c.Next returns, with the status the app's ErrorHandler
// gives an error by default, and rewrites the rate-limit fields: fasthttp
// sends the response after the handlers, so the fields always describe
// the bucket after the settlement. A body streamed with c.Context().SetBodyStreamWriter
// is sent after the settlement, so its size cannot be the final cost.
// Handlers record a final cost with [SetCost] and c.UserContext().
//
// # Client addresses and proxies
//
// [keyfunc.IP] keys requests by the connection's peer address, as fasthttp
// reports it, and reads no forwarding header unless trusted proxies are
// named with [keyfunc.TrustProxies]. This package never uses fiber.Ctx.IP
// or IPs, which follow the app's ProxyHeader setting. Formatting the peer
// address costs one small allocation per request that reads it.
//
// # Routes and buckets
//
// A middleware is one budget per key across every route it guards: one
// added with App.Use or Group allows its limit per key across what it
// guards, and one attached to a route counts for that route. Buckets are
// named by the limits, never by where the middleware was made (see
// package policy). [WithPerRoute] counts each route apart, by its path
// (fiber.Ctx.Route, HEAD counted as GET), but only on a middleware attached to
// the routes: one added with App.Use or Group runs before fiber knows the
// request's route (see Route keys below), so per route it counts every
// request in one scope, route:unmatched, and warns once. Two middlewares
// with the same limits and no scope share their budget; the first time
// both have seen requests on different routes, one warning names both and
// the fix ([WithScope] for each).
//
// # Route keys
//
// [keyfunc.Route] reads the matched route's path, such as "/items/:id". In
// fiber v2 a handler added with App.Use, or with Group and handlers, is a
// route of its own that matches a path prefix and runs before the request's
// route is known. fiber does not mark such routes, so the route is reported
// only when it is the request's own: a route with parameters or a
// wildcard, or one whose path is the request's path (up to case and a
// trailing slash). A Use handler at "/" or at a group's prefix therefore
// sees no route, and a route key fails there with [keyfunc.ErrNoKey]
// (answered 400) rather than putting every path in one bucket. Attach a
// middleware that keys by route to the route itself:
//
//	app.Get("/items/:id", fiberlimit.New(lim, limit, keyfunc.Route()), items)
//
// Keys that do not depend on the route (IP, tenant, user) work in App.Use.
//
// # Request-scoped values
//
// [keyfunc.User] and [keyfunc.TenantValue] find values stored with
// fiber.Ctx.Locals, then values in the user context.
//
// # Request context and buffers
//
// The limiter runs with fiber.Ctx.UserContext, which fiber v2 never cancels
// when a client hangs up: a wait (see [WithWait]) ends at its bound, or
// when earlier middleware sets a user context that ends sooner, such as a
// timeout.
//
// fiber reuses its request buffers once a handler returns. The strings this
// package hands to key functions share them and are never kept: keyfunc's
// extractors build new strings, and the limiter copies the keys it stores.
// A custom key function, skip, cost or limit function must not keep the
// strings it reads from the request either.
package fiberlimit
