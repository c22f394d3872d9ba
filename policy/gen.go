package policy

// The adapters' shared options (<adapter>/options_gen.go) are generated from
// this package's: after adding or changing an option, run go generate ./policy.
//go:generate go run ../internal/adaptergen
