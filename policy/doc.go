// Package policy is what a rate-limiting middleware does with a request,
// written once for every framework: skip it, find its key, choose its
// limits and cost, ask the engine (or wait for tokens), and say what to
// answer: the status, the rate-limit header fields and the body.
//
// The adapters (httplimit, ginlimit, echolimit, fiberlimit) only translate:
// each wraps its framework's request in a [keyfunc.Request], calls
// [Policy.Decide], writes the [Verdict] the way its framework expects, and
// calls [Verdict.Done] when a request it passed on ends. When the verdict
// [Verdict.Settles] (charging by the response), it also passes the handlers
// [Verdict.Context] and calls [Verdict.Settle] with the response's status:
// as the status is written when [Verdict.AtStatus], else when the handlers
// return, rewriting the header fields if they have not been sent.
// Their options are this package's, instantiated for the framework's
// request type, so the adapters cannot drift apart. Each adapter's
// options_gen.go, which go generate ./policy writes, has one documented
// function per option of this package:
//
//	// in ginlimit:
//	type Option = policy.Option[*gin.Context, Handlers]
//
//	func WithSkip(f func(*gin.Context) bool) Option {
//		return policy.WithSkip[*gin.Context, Handlers](f)
//	}
//
// Users of an adapter never need this package, except to name a
// [HeaderStyle]. Someone writing an adapter for another framework builds
// on [New] and runs the conformance table in the adaptertest package.
//
// # Bucket identity
//
// A middleware reads as users read it: mounted on a group (gin's or echo's
// r.Use, a router group, fiber's App.Use, httplimit around an
// http.ServeMux, a gRPC interceptor), it is one budget per key across every
// route it guards, so r.Use(ginlimit.New(lim, core.PerMinute(600), tenant))
// allows 600 a minute per tenant across the service; mounted on one route,
// it counts for that route. No framework tells a middleware which of the
// two mounted it, so that is the default and [WithPerRoute] is the one
// option that changes it: WithPerRoute(true) gives each route a budget of
// its own per key.
//
// A middleware's buckets are named by what is limited, never by where or
// in what order the middleware was made, so that every replica, of every
// build, counts a request in the same buckets, through a rolling deploy
// too: the limits (the main one and those of [WithLimits]), the request's
// key, and a scope. Without an option there is no scope: the buckets are
// those of the engine's [core.Limiter.Prepare] with the limits, which code
// outside the middleware (or the sluice command's usage and reset) can
// read and reset by key. [WithScope] names the scope, and middlewares
// with one scope and the same limits share buckets, those of
// [core.Limiter.PrepareScoped] with that scope. Under [WithPerRoute] the
// scope is the route: the method and the pattern the framework registered,
// as [keyfunc.Route] writes it ("route:GET /items/:id": gin's full path,
// echo's path, fiber's route path, net/http's Request.Pattern, gRPC's full
// method), with HEAD counted as GET; every request that matched no route,
// or whose route the middleware cannot see (fiber's App.Use runs before
// routing; gorilla/mux and httprouter report no pattern), counts in one
// scope, "route:unmatched", so a scanner walking random paths draws on one
// bucket per key. [WithRoute] names the route where the router reports
// none.
//
// Two middlewares with the same limits and no scope share their budget,
// as twins made by one helper for two routes would: the first time both
// have seen requests, on different routes, with keys of one kind, one
// warning on the limiter's logger names both routes and the fix (a
// [WithScope] each, or WithPerRoute(true)). A penalty lock ([WithPenalty])
// is a middleware's own setting too, and holds in its buckets on every
// replica.
//
// The engine that decides a key lives in core; this package decides a
// request.
package policy
