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
// A middleware's buckets are named by what is limited, never by where or
// in what order the middleware was made, so that every replica, of every
// build, counts a request in the same buckets, through a rolling deploy
// too: the limits (the main one and those of [WithLimits]), the request's
// key, and a scope, which is the request's route unless [WithScope] names
// one. The route is the method and the pattern the framework registered,
// as [keyfunc.Route] writes it ("route:GET /items/:id": gin's full path,
// echo's path, fiber's route path, net/http's Request.Pattern, gRPC's full
// method), with HEAD counted as GET; every request that matched no route,
// or whose route the middleware cannot see, counts in one scope,
// "route:unmatched", so a scanner walking random paths draws on one
// bucket per key. So two routes guarded by middlewares made apart, on the
// routes themselves or by one helper, never share buckets; nor do the
// routes of one middleware registered for a group (gin's or echo's r.Use,
// httplimit around an http.ServeMux, a gRPC interceptor): each route has
// its own budget per key. To give a
// group one budget per key across its routes, name a scope, one line:
// r.Use(ginlimit.New(lim, limit, key, ginlimit.WithScope("api"))).
// Middlewares with one scope and the same limits share buckets, which are
// those of the engine's [core.Limiter.PrepareScoped] with that scope. A
// middleware that runs before the router has matched the request (fiber's
// App.Use, or a net/http handler around something other than an
// http.ServeMux) sees no route: all its requests count in the unmatched
// scope, one budget across the group; attach it to the routes to count
// per route. A penalty lock ([WithPenalty]) is a middleware's own setting
// too, and holds in its buckets on every replica.
//
// The engine that decides a key lives in core; this package decides a
// request.
package policy
