package bench

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core"
)

// sluicePath adapts a core.PathRule of four levels, each under the
// workload's limit: the workload's key is the root, and every decision
// walks the same path below it ("team", "user", "key"), so every level
// holds the same bucket and the path admits exactly what one bucket
// would, at the cost of four keys decided in one script call.
type sluicePath struct {
	r *core.PathRule
}

func (s *sluicePath) Allow(ctx context.Context, key string) (bool, error) {
	res, err := s.r.Allow(ctx, key, "team", "user", "key")
	if err != nil {
		return false, err
	}
	if res.Degraded {
		return res.Allowed, ErrDegraded
	}
	return res.Allowed, nil
}

// newSluicePath returns the builder of sluice/path4 (path true) or
// sluice/limits4.
func newSluicePath(path bool) func(Env, Limit) (*Built, error) {
	return func(env Env, lim Limit) (*Built, error) {
		b, err := newSluice()(env, lim)
		if err != nil {
			return nil, err
		}
		l := b.Limiter.(*sluice).l
		cl := coreLimit(lim)
		if path {
			var levels []core.Level
			for _, name := range []string{"org", "team", "user", "key"} {
				levels = append(levels, core.Level{Name: name, Limits: []core.Limit{cl}})
			}
			r, err := l.PreparePath("bench", levels...)
			if err != nil {
				return nil, err
			}
			b.Limiter = &sluicePath{r: r}
			return b, nil
		}
		var limits []core.Limit
		for i := range 4 {
			limits = append(limits, cl.WithName(fmt.Sprint(i)))
		}
		r, err := l.Prepare(limits...)
		if err != nil {
			return nil, err
		}
		b.Limiter = &sluiceRule{r: r} // one key under the limit four times: the one-key form of a path
		return b, nil
	}
}
