// Package model is what the engine (package core) and its stores share,
// and nothing else: the bucket's limits in integer form ([Tick]), their
// calendar windows ([Calendar]), a decision ([Decision]), a compiled
// plan's store-facing part ([Plan]), and the plain records a store is
// asked and answers with ([SlotAsk], [LeaseCall], [NoAnswer], ...); and
// the one hash a key is known by where only its hash is kept
// ([KeyHash]: the top-talkers sketches, and core/replay's sampler).
//
// It sits at the bottom of core's stack: it imports nothing of the engine
// or of the Redis store (core/internal/redisstore), and both import it.
// See docs/architecture.md, Layers.
package model
