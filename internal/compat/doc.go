// Package compat holds the checks of sluice that need dependencies its
// users must not inherit: miniredis (whose Lua is gopher-lua, not Redis's),
// goleak, the YAML and TOML decoders a service reads its limits with, and
// the routers that report no route pattern (gorilla/mux, httprouter).
//
// It is a module of its own for that reason. go mod tidy records checksums
// for what the tests of every imported package import, so had these tests
// stayed in core, every program importing core would carry miniredis,
// goleak, YAML and TOML in its go.sum. The package itself is empty; only
// its tests run.
package compat
