// Package redisstore is the Redis store of package core: the only code of
// sluice that talks to Redis. It owns the road every operation travels
// (one breaker per node, one sender, batches per node), the Lua scripts
// and their encoders and decoders, the names of every key the library
// writes, the outage log, and what the scripts saw of each server.
//
// It sits between the engine (package core, which builds it in New and
// asks it through core's store interface) and the model
// (core/internal/model, the records both use). It cannot import the
// engine: what the engine must hear goes up through [Up], handed down
// when the store is built. Names it exports are core's to use; users
// cannot import it. See docs/architecture.md, Layers.
package redisstore
