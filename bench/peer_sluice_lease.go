package bench

import (
	"context"

	"github.com/sluicehq/sluice/core"
)

// leaseBound is the bound the sluice/lease peer accepts: 1% of the burst
// (see core.Rule.WithTokenLeases).
var leaseBound = core.LeaseBound{Fraction: 0.01}

// sluiceRule adapts a core.Rule (sluice/lease, sluice/limits4). A decision
// the library made without Redis (its local fallback) is reported as
// ErrDegraded; one made from a token lease is a decision of the store's,
// whose tokens left Redis before.
type sluiceRule struct {
	r *core.Rule
}

func (s *sluiceRule) Allow(ctx context.Context, key string) (bool, error) {
	res, err := s.r.Allow(ctx, key)
	if err != nil {
		return false, err
	}
	if res.Degraded {
		return res.Allowed, ErrDegraded
	}
	return res.Allowed, nil
}

// newSluiceLease builds sluice with its defaults and the limit prepared as
// a rule with token leases for hot keys, bounded by leaseBound. Close gives
// back the unspent tokens, then closes the client.
func newSluiceLease(env Env, lim Limit) (*Built, error) {
	b, err := newSluice()(env, lim)
	if err != nil {
		return nil, err
	}
	l := b.Limiter.(*sluice).l
	base, err := l.Prepare(coreLimit(lim))
	if err == nil {
		base, err = base.WithTokenLeases(leaseBound)
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	closeClient := b.Close
	b.Limiter = &sluiceRule{r: base}
	b.Close = func() {
		_ = l.Close()
		closeClient()
	}
	return b, nil
}
