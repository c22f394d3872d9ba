// Package adaptertest holds the conformance scenarios for sluice adapters:
// one table of requests and expected answers that every rate-limiting
// middleware built on [policy.Policy] must pass, whatever its framework.
//
// sluice's own adapters (httplimit, ginlimit, echolimit and fiberlimit) run
// it in their tests, and so can anyone writing an adapter for another
// framework. It is a test kit: nothing in it belongs on a request path.
//
// # Writing a builder
//
// A scenario describes its middlewares in neutral terms ([Middleware]): a
// limit, a key function, and options as plain values or as functions of a
// neutral [Call]. Its routes are a method and a pattern in net/http syntax
// with named parameters, "/items/{id}" ([Route.ColonPattern] gives
// "/items/:id"). An adapter's test supplies a [Build] function that turns an
// [App] into the framework's router, in memory, and returns a [Serve]
// function that sends one [Request] through it:
//
//	func TestConformance(t *testing.T) {
//		adaptertest.Run(t, func(tb testing.TB, app adaptertest.App) adaptertest.Serve {
//			r := myframework.New()
//			// register app.Use with the framework's own "use" call, each
//			// route with its own middleware, translate the neutral options
//			// into the adapter's, and answer each route with adaptertest.OK
//			return adaptertest.ServeHTTP(r)
//		})
//	}
//
// The builder's route handlers answer 200 with the body [OK] as plain text,
// after calling the route's [Route.Handler] when it has one. A neutral deny
// or error handler returns a [Reply], which the builder's native handler
// writes as it is.
//
// [ServeHTTP] serves requests through any http.Handler with
// net/http/httptest. Frameworks that are not built on net/http perform the
// request their own way, but must hand the handler the peer address in
// [Request.RemoteAddr] (the IP scenarios depend on it) and make
// [Request.Context] the context the adapter passes to the policy.
//
// The app-wide middleware of a scenario never keys by route nor counts per
// route (WithPerRoute): not every framework knows the route there (see
// fiberlimit's documentation).
//
// # What is checked
//
// Every scenario runs on a limiter of its own: in memory ([Memory]), in
// memory with a frozen clock so that header values are exact ([Frozen]),
// or on a Redis that is down ([DownRedis]). The steps check
// status codes, rate-limit header fields, Retry-After, content types and
// bodies, and every answer is checked never to contain an error's text.
// No scenario sleeps; the waiting ones take a few tens of milliseconds.
//
// [CheckConcurrency] checks a concurrency cap (WithConcurrency) with the
// same builder: requests held in a route's handler, concurrent requests, a
// handler that panics and a client that hangs up, in memory and on a real
// Redis.
package adaptertest
