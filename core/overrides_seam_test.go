package core

import "context"

// TestOverrides is what the engine's own tests need of an overrides set
// (package overrides, which imports this one, so these tests cannot).
type TestOverrides interface {
	Deny(ctx context.Context, key string) error // a deny entry for key, read back
	Sync(ctx context.Context) error
	Has(key string) bool
	Close() error
}

// NewTestOverrides returns lim's overrides set name, refreshed hourly (its
// tests sync it by hand). overrides_seam_ext_test.go sets it, from the
// external test package, which may import package overrides.
var NewTestOverrides func(lim *Limiter, name string) (TestOverrides, error)
