package core_test

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/overrides"
)

func init() {
	core.NewTestOverrides = func(lim *core.Limiter, name string) (core.TestOverrides, error) {
		set, err := overrides.New(lim, name, overrides.WithRefresh(time.Hour))
		if err != nil {
			return nil, err
		}
		return testSet{set}, nil
	}
}

// testSet is an overrides set as core.TestOverrides.
type testSet struct{ *overrides.Set }

func (s testSet) Deny(ctx context.Context, key string) error {
	return s.Set.Set(ctx, key, overrides.Override{Deny: true})
}

func (s testSet) Has(key string) bool {
	_, ok := s.Lookup(key)
	return ok
}
