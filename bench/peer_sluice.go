package bench

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core"
)

// sluice adapts a core.Limiter. A decision the library made without Redis
// (its local fallback) is reported as ErrDegraded.
type sluice struct {
	l   *core.Limiter
	lim core.Limit
}

func (s *sluice) Allow(ctx context.Context, key string) (bool, error) {
	res, err := s.l.Allow(ctx, key, s.lim)
	if err != nil {
		return false, err
	}
	if res.Degraded {
		return res.Allowed, ErrDegraded
	}
	return res.Allowed, nil
}

func coreLimit(lim Limit) core.Limit {
	return core.Limit{Rate: lim.Rate, Period: lim.Period, Burst: lim.Burst}
}

// sluiceBudget replaces sluice's default 50 ms budget per Redis call with the
// 5 s read timeout every client here has: the other libraries have no budget
// of their own, and with 256 callers queued on one core a call can wait
// longer than 50 ms, after which sluice decides locally (and the comparison
// would count those decisions as made without Redis). In a Production
// environment (the fleet) every client has docs/production.md's 500 ms read
// timeout, so sluice's budget is that too: on a shared two-core machine a
// 50 ms budget is sometimes blown by scheduling alone, and sluice would
// then be measured deciding locally while the others merely wait.
const (
	sluiceBudget           = 5 * time.Second
	sluiceProductionBudget = 500 * time.Millisecond
)

// BudgetEnv names the environment variable that, when set to a duration
// ("50ms"), replaces sluice's budget in a Production environment (the
// fleet): to measure what the library's default budget does on a busy
// host. Worker processes inherit it.
const BudgetEnv = "SLUICE_BENCH_BUDGET"

// ProductionBudget is sluice's budget in a Production environment: $BudgetEnv
// if it holds a positive duration, else 500 ms.
func ProductionBudget() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(BudgetEnv)); err == nil && d > 0 {
		return d
	}
	return sluiceProductionBudget
}

// BatchingEnv names the environment variable that, when set to a whole
// number, replaces sluice's batches in flight per node (core.WithBatching;
// 0 turns batching off): to measure another setting than the default
// without a build of its own. Worker processes inherit it.
const BatchingEnv = "SLUICE_BENCH_BATCHING"

// OwnConnsEnv names the environment variable that, set to 0, keeps
// sluice's lone decisions in its client's pool in a Production
// environment, where it otherwise takes core.WithOwnConnections as
// docs/production.md advises: to measure the difference without a build
// of its own. Worker processes inherit it.
const OwnConnsEnv = "SLUICE_BENCH_OWNCONNS"

// quietLogger drops the limiter's state-transition logs, which would
// otherwise land in the middle of the tables.
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// newSluice returns the builder of a Redis-backed sluice limiter with opts
// added to the defaults.
func newSluice(opts ...core.Option) func(Env, Limit) (*Built, error) {
	return func(env Env, lim Limit) (*Built, error) {
		cl := coreLimit(lim)
		if err := cl.Validate(); err != nil {
			return nil, err
		}
		t := new(Traffic)
		rdb := NewClient(env, t)
		base := []core.Option{core.WithLogger(quietLogger)}
		if env.Production {
			base = append(base, core.WithTimeout(ProductionBudget()))
		} else {
			base = append(base, core.WithTimeout(sluiceBudget))
		}
		if n, err := strconv.Atoi(os.Getenv(BatchingEnv)); err == nil && n >= 0 {
			base = append(base, core.WithBatching(n))
		}
		if env.Production && os.Getenv(OwnConnsEnv) != "0" {
			// docs/production.md's advice for a fleet's replicas.
			base = append(base, core.WithOwnConnections(true))
		}
		l, err := core.New(rdb, append(base, opts...)...)
		if err != nil {
			_ = rdb.Close()
			return nil, err
		}
		return builtOnClient(&sluice{l: l, lim: cl}, rdb, t, ""), nil
	}
}

func newSluiceMemory(_ Env, lim Limit) (*Built, error) {
	cl := coreLimit(lim)
	if err := cl.Validate(); err != nil {
		return nil, err
	}
	l, err := core.NewMemory(core.WithLogger(quietLogger))
	if err != nil {
		return nil, err
	}
	return &Built{Limiter: &sluice{l: l, lim: cl}, Close: func() {}}, nil
}
