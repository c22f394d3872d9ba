package core

// redisOf returns the Redis store of l, a limiter made by New, for tests
// that look inside it.
func redisOf(l *Limiter) *redisStore { return l.store.(*redisStore) }

// lentOf returns what l lends package overrides.
func lentOf(l *Limiter) lent { return l.store.Lend(l.log, l.timeout).(lent) }
