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
//	type Option = policy.Option[*gin.Context, handlers]
//
//	func WithSkip(f func(*gin.Context) bool) Option {
//		return policy.WithSkip[*gin.Context, handlers](f)
//	}
//
// Users of an adapter never need this package, except to name a
// [HeaderStyle]. Someone writing an adapter for another framework builds
// on [New] and runs the conformance table in the adaptertest package.
//
// The engine that decides a key lives in core; this package decides a
// request.
package policy
