package core

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/internal/storeops"
)

// The limiter lends package overrides its road to Redis through
// internal/storeops: the set's scripts stay with the store's others, and
// are sent as operations of kind OpOverrides.
func init() {
	storeops.Of = func(lim any) storeops.Store {
		if l, ok := lim.(*Limiter); ok && l != nil {
			return lent{l}
		}
		return nil
	}
}

// lent is a limiter as package overrides sees it.
type lent struct{ l *Limiter }

func (s lent) Memory() bool          { return s.l.store.inProcess() }
func (s lent) Logger() *slog.Logger  { return s.l.log() }
func (s lent) Budget() time.Duration { return s.l.timeout }

// overridesKeys returns the Redis keys of the overrides set named set: its
// hash, <prefix>{ovr:<set>}; its version counter, bumped by every change
// in the same script call; its epoch, new with each history of the set;
// and its last write's id (see overrides_load.lua). One hash tag: one
// Cluster slot. No expiry: no volatile-* policy evicts them.
func (l *Limiter) overridesKeys(set string) []string {
	base := l.prefix + "{ovr:" + set + "}"
	return []string{base, base + "v", base + "e", base + "w"}
}

func (s lent) SetOverride(ctx context.Context, set, key, text string, max int) (int64, error) {
	return s.l.sendScriptInt(ctx, OpOverrides, overrideSetScript, s.l.overridesKeys(set), key, text, max, newLeaseID())
}

func (s lent) RemoveOverride(ctx context.Context, set, key string) (int64, error) {
	k := s.l.overridesKeys(set)
	return s.l.sendScriptInt(ctx, OpOverrides, overrideRemoveScript, []string{k[0], k[1], k[3]}, key, newLeaseID())
}

func (s lent) LoadOverrides(ctx context.Context, set, known string, max int) ([]any, error) {
	return s.l.sendScriptSlice(ctx, OpOverrides, overrideLoadScript, s.l.overridesKeys(set), known, max)
}
