package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/pause"
	"github.com/sluicehq/sluice/redistest"
)

// lateMark marks the context of the call a lateHook slows down; the
// limiter's background calls (the lease keeper's) do not carry it.
type lateMark struct{}

// lateHook is a go-redis hook that fails script calls made under a
// marked context with context.DeadlineExceeded, the way a pause of this
// process makes a call time out, and records every marked script call's
// deadline. While on, it holds up to the number of calls hold says (-1:
// all) and passes the rest through. With stop unset a held call returns
// lateBy after its deadline: a deadline noticed late, which the store
// judges a pause of this process (see faultOf). With stop set, this
// process is stopped (SIGSTOP) for stop, and the call fails at once,
// before its deadline: a timeout that came early, in a pause the pause
// detector saw.
type lateHook struct {
	on     atomic.Bool
	hold   atomic.Int32
	lateBy time.Duration
	stop   time.Duration
	mu     sync.Mutex
	dls    []time.Time // deadlines of the calls seen; zero for none
}

func (h *lateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.holds(ctx, cmd) {
			return next(ctx, cmd)
		}
		return h.fail(ctx, []redis.Cmder{cmd})
	}
}

func (h *lateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || !h.holds(ctx, cmds[0]) {
			return next(ctx, cmds)
		}
		return h.fail(ctx, cmds)
	}
}

// holds records cmd's deadline if it is a marked script call, and reports
// whether to hold it.
func (h *lateHook) holds(ctx context.Context, cmd redis.Cmder) bool {
	name := cmd.Name()
	if !h.on.Load() || ctx.Value(lateMark{}) == nil || (name != "evalsha" && name != "eval") {
		return false
	}
	dl, _ := ctx.Deadline()
	h.mu.Lock()
	h.dls = append(h.dls, dl)
	h.mu.Unlock()
	for {
		n := h.hold.Load()
		if n == 0 {
			return false
		}
		if n < 0 || h.hold.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// fail fails cmds, sent under ctx, with a timeout (see lateHook).
func (h *lateHook) fail(ctx context.Context, cmds []redis.Cmder) error {
	if h.stop > 0 {
		// Stopped again if the detector did not see it as a pause (a
		// CONT from elsewhere, such as under-load --stall, cut it short).
		script := fmt.Sprintf("kill -STOP $1; sleep %.3f; kill -CONT $1", h.stop.Seconds())
		for start := pause.Now(); !pause.Overlaps(start, pause.Now()); {
			if err := exec.Command("sh", "-c", script, "stop", strconv.Itoa(os.Getpid())).Run(); err != nil {
				panic(err)
			}
		}
	} else {
		dl, ok := ctx.Deadline()
		wait := h.lateBy
		if ok {
			wait += time.Until(dl)
		}
		time.Sleep(wait) // the deadline is noticed late: that is the fault under test
	}
	for _, c := range cmds {
		c.SetErr(context.DeadlineExceeded)
	}
	return context.DeadlineExceeded
}

// deadlines returns the deadlines recorded since the last call, and
// forgets them.
func (h *lateHook) deadlines() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := slices.Clone(h.dls)
	h.dls = nil
	return d
}

// budgetCase is a call of one kind whose budget is tested: setup readies
// it on lim (with the hook off), and returns the call, which reports
// whether Redis answered it.
type budgetCase struct {
	name  string
	setup func(t *testing.T, lim *Limiter) func(ctx context.Context) (answered bool, err error)
}

// budgetLimit is the limit the budget tests decide under.
var budgetLimit = Limit{Rate: 100, Period: time.Second, Burst: 10}

// budgetCases are the kinds of calls a caller makes, one each.
func budgetCases(limit Limit) []budgetCase {
	type call = func(context.Context) (bool, error)
	return []budgetCase{
		{"decide", func(t *testing.T, lim *Limiter) call {
			return func(ctx context.Context) (bool, error) {
				res, err := lim.Allow(ctx, "k", limit)
				return !res.Degraded, err
			}
		}},
		{"peek", func(t *testing.T, lim *Limiter) call {
			return func(ctx context.Context) (bool, error) { return answered(lim.Peek(ctx, "k", limit)) }
		}},
		{"path", func(t *testing.T, lim *Limiter) call {
			pr, err := lim.PreparePath("budget", Level{Name: "org", Limits: []Limit{limit}}, Level{Name: "user", Limits: []Limit{limit}})
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) (bool, error) {
				res, err := pr.Allow(ctx, "o", "u")
				return !res.Degraded, err
			}
		}},
		{"reset", func(t *testing.T, lim *Limiter) call {
			return func(ctx context.Context) (bool, error) { return answered(Result{}, lim.Reset(ctx, "k", limit)) }
		}},
		{"settle", func(t *testing.T, lim *Limiter) call {
			r, err := lim.Prepare(limit)
			if err != nil {
				t.Fatal(err)
			}
			var rv *Reservation
			byRedis(t, "Reserve", func() (bool, error) {
				rv, err = r.Reserve(context.Background(), "k", 2)
				return err == nil && !rv.Result.Degraded && rv.Result.Allowed, err
			})
			return func(ctx context.Context) (bool, error) { return answered(Result{}, rv.Settle(ctx, 1)) }
		}},
		{"acquire", func(t *testing.T, lim *Limiter) call {
			c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 3})
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) (bool, error) {
				ls, err := c.Acquire(ctx, "k")
				return err == nil && !ls.Degraded, err
			}
		}},
		{"release", func(t *testing.T, lim *Limiter) call {
			c, err := lim.PrepareConcurrency(ConcurrencyLimit{Max: 3})
			if err != nil {
				t.Fatal(err)
			}
			var ls *Lease
			byRedis(t, "Acquire", func() (bool, error) {
				ls, err = c.Acquire(context.Background(), "k")
				if err == nil && ls.Degraded {
					_ = ls.Release(context.Background())
				}
				return err == nil && ls.Acquired && !ls.Degraded, err
			})
			return func(ctx context.Context) (bool, error) { return answered(Result{}, ls.Release(ctx)) }
		}},
	}
}

// byRedis calls f until it reports that Redis made what it asked for
// (a call of the setup may time out in a pause of this process on a busy
// machine, and be decided under the failure policy), and fails t on an
// error or after 20 calls.
func byRedis(t *testing.T, what string, f func() (bool, error)) {
	t.Helper()
	for range 20 {
		ok, err := f()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
	}
	t.Fatalf("%s: 20 calls, none made by Redis", what)
}

// answered turns the outcome of a call that reports a store it could not
// ask as ErrUnavailable (a peek, a reset, a settlement, a release) into
// whether the store answered, and any other error.
func answered(res Result, err error) (bool, error) {
	if errors.Is(err, ErrUnavailable) {
		return false, nil
	}
	return err == nil && !res.Degraded, err
}

// budgetRun makes tc's call, with hook on, on a fresh limiter with budget
// and batching, and returns the deadlines of its sends, whether Redis
// answered it, and its observer.
func budgetRun(t *testing.T, addr string, hook *lateHook, tc budgetCase, budget time.Duration, batching int) ([]time.Time, bool, *roadRecorder) {
	t.Helper()
	rdb := redistest.NewClient(t, addr)
	rdb.AddHook(hook)
	rec := newRoadRecorder()
	lim, err := New(rdb, WithPrefix(uniquePrefix()), WithTimeout(budget), WithBatching(batching),
		WithFallbackReplicas(1), WithObserver(rec), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	if _, err := lim.Allow(context.Background(), "warm", budgetLimit); err != nil {
		t.Fatal(err)
	}
	call := tc.setup(t, lim)
	hook.on.Store(true)
	asked := time.Now()
	ok, err := call(context.WithValue(context.Background(), lateMark{}, true))
	took := time.Since(asked)
	hook.on.Store(false)
	if err != nil {
		t.Fatalf("the call = %v, want it answered or decided under the failure policy", err)
	}
	dls := hook.deadlines()
	if len(dls) == 0 {
		t.Fatal("the call never reached the hook")
	}
	// The first send's budget counts from its send, a moment after the
	// caller asked (the engine's own work, and the scheduler on a busy
	// machine); every later send ends by the first one's deadline, give
	// or take the moment between taking the time left and sending.
	first := dls[0]
	if first.IsZero() {
		t.Fatal("the first send had no deadline")
	}
	if late := first.Sub(asked.Add(budget)); late > budget/2 && !pause.Overlaps(pause.At(asked), pause.Now()) {
		t.Errorf("the first send's deadline is %v past the budget of the moment asked", late)
	}
	for i, dl := range dls[1:] {
		if dl.IsZero() || dl.Sub(first) > 20*time.Millisecond {
			t.Errorf("send %d of %d: deadline %v past the first send's (the call took %v)", i+2, len(dls), dl.Sub(first), took)
		}
	}
	if o := rec.outages(); len(o) != 0 {
		t.Errorf("a send that timed out in a pause of this process opened a breaker: %v", o)
	}
	t.Logf("%d send(s), the call took %v (budget %v), answered by Redis: %v", len(dls), took, budget, ok)
	return dls, ok, rec
}

// TestOneBudgetPerCall: every kind of call a caller makes spends at most
// one budget from the moment it asked, however its sends fail. Each send's
// deadline is recorded by a hook that holds the script calls of the call
// under test past their deadline, as a pause of this process does (its
// timeout is then nobody's fault): no send may carry a deadline beyond the
// first send's, which is the budget from the moment the caller asked (and
// the engine's own work since), and the call is decided under the failure
// policy without blaming Redis. Before, a send that timed out
// in a pause was sent again with a whole new budget (two budgets), and an
// acquisition asked once more after a timeout, which with the pause's
// resend made four.
func TestOneBudgetPerCall(t *testing.T) {
	srv := redistest.Start(t)
	for _, batching := range []int{0, 4} {
		for _, tc := range budgetCases(budgetLimit) {
			t.Run(fmt.Sprintf("%s/batching=%d", tc.name, batching), func(t *testing.T) {
				hook := &lateHook{lateBy: 40 * time.Millisecond}
				hook.hold.Store(-1)
				budgetRun(t, srv.Addr(), hook, tc, 100*time.Millisecond, batching)
			})
		}
	}
}

// TestResendSharesTheBudget: a send that timed out early, in a pause of
// this process (stopped for 250 ms of a 1 s budget), is sent once more,
// alone, under what is left of the call's budget, and Redis answers it:
// the pause costs the caller neither its answer nor a second budget, and
// Redis no breaker. Before, the send again had a whole budget of its own.
func TestResendSharesTheBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("stops this process")
	}
	srv := redistest.Start(t)
	for _, batching := range []int{0, 4} {
		for _, tc := range budgetCases(budgetLimit) {
			t.Run(fmt.Sprintf("%s/batching=%d", tc.name, batching), func(t *testing.T) {
				hook := &lateHook{stop: 250 * time.Millisecond}
				hook.hold.Store(1)
				dls, ok, rec := budgetRun(t, srv.Addr(), hook, tc, time.Second, batching)
				rec.mu.Lock()
				paused := rec.paused
				rec.mu.Unlock()
				// A script Redis does not hold yet is sent twice
				// (EVALSHA, then EVAL): the hook sees three calls.
				if len(dls) < 2 || !ok || paused != 1 {
					t.Errorf("%d script calls, answered by Redis %v, %d store errors excused by a pause; want it sent again, answered, and the first send excused", len(dls), ok, paused)
				}
			})
		}
	}
}
