// Package storeops lends the packages of this module that are not the
// engine (package overrides) the engine's one road to Redis, without
// making it part of core's API. Package core sets [Of] when it is
// initialized; every call it hands out goes through the limiter's store
// layer (its budget, NOSCRIPT, routing and observer), and the scripts stay
// with the store's others in core.
package storeops

import (
	"context"
	"log/slog"
	"time"
)

// Store is what a limiter lends an overrides set.
type Store interface {
	// Memory reports a limiter made by core.NewMemory: there is no
	// store, and the set lives in process memory.
	Memory() bool
	// Logger is the limiter's logger.
	Logger() *slog.Logger
	// Budget is the limiter's time budget (core.WithTimeout); 0 for none.
	Budget() time.Duration
	// SetOverride runs overrides_set.lua on the keys of the set named
	// set: key's entry becomes text unless the set holds max entries
	// already. It returns the script's reply.
	SetOverride(ctx context.Context, set, key, text string, max int) (int64, error)
	// RemoveOverride runs overrides_remove.lua on the set's keys.
	RemoveOverride(ctx context.Context, set, key string) (int64, error)
	// LoadOverrides runs overrides_load.lua on the set's keys: the set,
	// unless its version is known.
	LoadOverrides(ctx context.Context, set, known string, max int) ([]any, error)
}

// Of returns the Store of lim, a *core.Limiter, or nil for any other
// value. Package core sets it.
var Of func(lim any) Store

// CallerGone returns the caller's context error, also when its deadline
// has passed but its timer has not fired yet: the socket deadline go-redis
// sets from it can fire first.
func CallerGone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
