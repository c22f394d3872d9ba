package bench

import (
	"context"
	"sync"

	"golang.org/x/time/rate"
)

// xtime is golang.org/x/time/rate used as a per-key limiter: a map of
// token buckets behind one mutex, which is held only to find the key's
// bucket (each bucket has its own lock). Process-local, no Redis.
type xtime struct {
	mu    sync.Mutex
	keys  map[string]*rate.Limiter
	every rate.Limit
	burst int
}

func (x *xtime) Allow(_ context.Context, key string) (bool, error) {
	x.mu.Lock()
	l := x.keys[key]
	if l == nil {
		l = rate.NewLimiter(x.every, x.burst)
		x.keys[key] = l
	}
	x.mu.Unlock()
	return l.Allow(), nil
}

func newXTime(_ Env, lim Limit) (*Built, error) {
	x := &xtime{
		keys:  make(map[string]*rate.Limiter),
		every: rate.Limit(lim.PerSecondRate()),
		burst: lim.Burst,
	}
	return &Built{Limiter: x, Close: func() {}}, nil
}
