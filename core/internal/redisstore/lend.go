package redisstore

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/internal/storeops"
)

// lent is the Redis store as package overrides sees it.
type lent struct {
	rs     *Store
	log    func() *slog.Logger
	budget time.Duration
}

// Lend returns the store as package overrides sees it; log and budget
// are the limiter's.
func (s *Store) Lend(log func() *slog.Logger, budget time.Duration) storeops.Store {
	return lent{rs: s, log: log, budget: budget}
}

func (s lent) Memory() bool          { return false }
func (s lent) Logger() *slog.Logger  { return s.log() }
func (s lent) Budget() time.Duration { return s.budget }

func (s lent) SetOverride(ctx context.Context, set, key, text string, max int) (int64, error) {
	return s.rs.sendScriptInt(ctx, OpOverrides, overrideSetScript, s.rs.overridesKeys(set), key, text, max, newID())
}

func (s lent) RemoveOverride(ctx context.Context, set, key string) (int64, error) {
	k := s.rs.overridesKeys(set)
	return s.rs.sendScriptInt(ctx, OpOverrides, overrideRemoveScript, []string{k[0], k[1], k[3]}, key, newID())
}

func (s lent) LoadOverrides(ctx context.Context, set, known string, max int) ([]any, error) {
	return s.rs.sendScriptSlice(ctx, OpOverrides, overrideLoadScript, s.rs.overridesKeys(set), known, max)
}
