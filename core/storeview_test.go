package core

import (
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/internal/storeops"
)

// redisOf returns the Redis store of l, a limiter made by New, for tests
// that ask what it holds.
func redisOf(l *Limiter) *redisstore.Store { return l.store.(*redisstore.Store) }

// lentOf returns what l lends package overrides.
func lentOf(l *Limiter) storeops.Store { return l.store.Lend(l.log, l.timeout) }
