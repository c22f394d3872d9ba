package compat

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
)

// twoStores is one engine over two stores: a limiter on a fresh miniredis
// and one in memory, made with the same options, reading one virtual
// clock that advance moves for both.
type twoStores struct {
	m        *miniredis.Miniredis
	onRedis  *core.Limiter
	inMemory *core.Limiter
	now      time.Time
}

// newTwoStores returns the two limiters, both with opts, at a 2027
// instant. The miniredis one has no deny cache (the memory one has none)
// and a budget no scheduling delay reaches.
func newTwoStores(t *testing.T, opts ...core.Option) *twoStores {
	t.Helper()
	s := &twoStores{m: miniredis.RunT(t), now: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	rdb := redis.NewClient(&redis.Options{Addr: s.m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var err error
	s.onRedis, err = core.New(rdb, append(opts, core.WithDenyCache(false), core.WithTimeout(5*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.onRedis.Close() })
	s.inMemory, err = core.NewMemory(append(opts, core.WithClock(func() time.Time { return s.now }))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.inMemory.Close() })
	s.m.SetTime(s.now)
	return s
}

// advance moves both stores' clocks by d.
func (s *twoStores) advance(d time.Duration) {
	s.now = s.now.Add(d)
	s.m.SetTime(s.now)
	s.m.FastForward(d)
}
