// Package echov5limit is sluice's rate-limiting middleware for echo v5
// (github.com/labstack/echo/v5). It supports echo v5 only; package
// [github.com/sluicehq/sluice/echolimit] is the one for echo v4. Both take
// the same options and give the same answers.
//
// [New] returns an echo.MiddlewareFunc that limits requests by a key under
// a [core.Limit], on a [core.Limiter] that any number of middlewares share:
//
//	lim, err := core.New(rdb)
//	// ...
//	e := echo.New()
//	e.Use(echov5limit.New(lim, core.PerMinute(600), keyfunc.Tenant("X-Tenant")))
//	e.GET("/search", search, echov5limit.New(lim, core.PerSecond(5), keyfunc.IP()))
//
// The limiting itself (skip, key, limit choice, cost, decision or wait,
// dry run, header values) is [policy.Policy]'s; this package only adapts echo
// to it.
//
// # Answers
//
// An admitted request gets the rate-limit fields (X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset by default; see [WithHeaders])
// and goes on to the next handler. A denied one gets the same fields and
// Retry-After, and the middleware returns an *echo.HTTPError with status 429
// Too Many Requests, unless [WithDenyHandler] says otherwise: the app's
// HTTPErrorHandler answers it, as it answers every other error, and the
// fields stay on the response. With [WithProblemJSON] the 429 is written
// directly as problem details instead.
//
// A request that cannot be decided makes the middleware return an
// *echo.HTTPError, unless [WithErrorHandler] says otherwise: 400 Bad Request
// when it has no key (a missing tenant header, say: it is never let through
// unlimited), 503 Service Unavailable when the store is down under
// [core.FailClosed] or the client gave up while waiting, and 500 Internal
// Server Error otherwise. Its message is the status text and it wraps the
// cause (errors.Unwrap), so the app's HTTPErrorHandler answers it; echo's
// default one writes {"message":"Bad Request"}, and adds the cause's text
// only when made with echo.DefaultHTTPErrorHandler(true). With
// [WithProblemJSON], which echo's error handler cannot render, failures are
// answered directly with problem details instead.
//
// # Charging by the response
//
// With [WithChargeIf] alone, the middleware settles the request in a
// Response.Before hook, as the status is written, so the rate-limit
// fields describe the bucket after a refund. With [WithFinalCost], it
// settles once the next handler returns, and rewrites the fields only if
// the response is not committed yet. An error the next handler returns
// counts with the status the app's HTTPErrorHandler answers it with by
// default. Handlers record a final cost with [SetCost] and
// c.Request().Context().
//
// # Client addresses and proxies
//
// [keyfunc.IP] keys requests by the connection's peer address
// (http.Request.RemoteAddr) and reads no forwarding header unless trusted
// proxies are named with [keyfunc.TrustProxies], as in every adapter.
// echo.Context.RealIP is used only by [keyfunc.FrameworkClientIP], which
// follows the app's IPExtractor; echo v5 no longer believes forwarding
// headers from any peer when no IPExtractor is set.
//
// # Routes and buckets
//
// A middleware is one budget per key across every route it guards:
// e.Use(echov5limit.New(lim, core.PerMinute(600), key)) allows 600 a minute
// per key across the server (or a group, with g.Use), and a middleware
// given to one route counts for that route. echo does not tell a
// middleware which mounted it, so the choice is one option,
// [WithPerRoute]: WithPerRoute(true) counts each route apart, by its path
// (echo.Context.Path, HEAD counted as GET; requests that match no route
// together). Buckets are named by the limits and that choice, never by
// where the middleware was made (see package policy). Two middlewares with
// the same limits and no scope share their budget; the first time both
// have seen requests on different routes, one warning names both and the
// fix ([WithScope] for each, or WithPerRoute(true)).
//
// # Route keys
//
// [keyfunc.Route] reads echo.Context.Path, the matched route's pattern, such
// as "/items/:id". Middleware added with Echo.Use, with a group or on a
// route runs after routing, so route keys work in all three; middleware
// added with Echo.Pre runs before routing, where the path is still "" and a
// route key fails with [keyfunc.ErrNoKey] (answered 400). For a request that
// matches no route, echo reports the closest registered pattern or "".
//
// # Request-scoped values
//
// [keyfunc.User] and [keyfunc.TenantValue] find values stored with
// echo.Context.Set under a string key, then values in the request's context.
//
// # Cost
//
// echo v5 passes its context as a pointer, so the keyfunc view is one word
// and costs no allocation, unlike echo v4's.
//
// # Request context
//
// The request's context flows into the limiter: a client that hangs up
// ends its wait (see [WithWait]) and its Redis call.
package echov5limit
