package core

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// TestOwedStore holds the fallback's debt to Redis to its own admissions:
// counted under the share (10/s with a burst of 4 here: a third of 30/s,
// burst 10), decaying as the share refills, capped at the share's burst,
// taken once, and never holding what Redis admitted (the fallback's warm
// buckets, local.charge, are apart).
func TestOwedStore(t *testing.T) {
	p, err := newPlan([]Limit{{Rate: 30, Period: time.Second, Burst: 10}}, shareOf(3))
	if err != nil {
		t.Fatal(err)
	}
	ticks := p.local.ticks
	const t0 = int64(1_000_000_000)
	type step struct {
		name  string
		admit int64 // events the fallback admits at at
		at    int64 // microseconds after t0
		take  bool  // then take the debt at at
		want  int64 // what take returns
	}
	steps := []step{
		{name: "nothing owed", take: true, want: 0},
		{name: "two admitted", admit: 2, take: true, want: 2},
		{name: "taken once", take: true, want: 0},
		{name: "capped at the share's burst", admit: 9, take: true, want: 4},
		{name: "three admitted", admit: 3, at: 1_000_000},
		{name: "decays with the share: 150ms is 1.5 events, rounded up", at: 1_150_000, take: true, want: 2},
		{name: "admitted, then refilled", admit: 1, at: 2_000_000},
		{name: "nothing owed once refilled", at: 2_100_001, take: true, want: 0},
	}
	o := newOwedStore(1024)
	for _, s := range steps {
		now := t0 + s.at
		if s.admit > 0 {
			o.admitted(p, "k", now, ticks, s.admit)
		}
		if s.take {
			if got, _ := o.take(p, "k", now); got != s.want {
				t.Errorf("%s: take() = %d, want %d", s.name, got, s.want)
			}
		}
	}
	if o.holdsAny() {
		t.Errorf("holdsAny() = true after every debt was taken")
	}
	// A debt nobody takes goes once it is refilled: a miss in its shard
	// sweeps it (each key is looked for in its own shard: try many).
	o.admitted(p, "gone", t0, ticks, 1)
	for i := 0; o.holdsAny() && i < 10_000; i++ {
		o.take(p, fmt.Sprint("miss-", i), t0+time.Second.Microseconds())
	}
	if o.holdsAny() {
		t.Errorf("holdsAny() = true: a debt refilled long ago was never swept")
	}
	long := string(make([]byte, maxOwedKey+1))
	o.admitted(p, long, t0, ticks, 1)
	if o.holdsAny() {
		t.Errorf("a key of %d bytes was remembered; the longest is %d", len(long), maxOwedKey)
	}
}

// settleHook is a go-redis hook that fails the next hold calls of the
// settle script with context.DeadlineExceeded, after the call's budget and
// 40 ms more, as a pause of this process does: the store judges such a
// timeout the pause's (see faultOf). With through set, a held call reaches
// Redis first, and only its answer is lost. It counts the settle calls it
// sees.
type settleHook struct {
	through bool
	budget  time.Duration
	hold    atomic.Int32
	seen    atomic.Int32
}

func (h *settleHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *settleHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.process(ctx, []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (h *settleHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.process(ctx, cmds, func() error { return next(ctx, cmds) })
	}
}

func (h *settleHook) process(ctx context.Context, cmds []redis.Cmder, next func() error) error {
	if len(cmds) == 0 || !isSettle(cmds[0]) {
		return next()
	}
	h.seen.Add(1)
	if n := h.hold.Load(); n <= 0 || !h.hold.CompareAndSwap(n, n-1) {
		return next()
	}
	if h.through {
		_ = next()
	}
	wait := h.budget
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	time.Sleep(wait + 40*time.Millisecond) // the deadline noticed late: the fault under test
	for _, c := range cmds {
		c.SetErr(context.DeadlineExceeded)
	}
	return context.DeadlineExceeded
}

// isSettle reports whether cmd runs the settle script.
func isSettle(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch cmd.Name() {
	case "evalsha":
		return args[1] == redisstore.SettleScript.Hash()
	case "eval":
		return args[1] == redisstore.SettleLua
	}
	return false
}

// TestChargeSentAgainAfterPause: a charge of what the fallback admitted
// (owed.go) whose send timed out in a pause of this process is sent again
// under its marker, and Redis applies it once: whether the lost send never
// reached Redis, or reached it and only its answer was lost. Before, such
// a charge was dropped as one Redis had not answered, and the key came
// back to Redis that many admissions fuller.
func TestChargeSentAgainAfterPause(t *testing.T) {
	srv := redistest.Start(t)
	limit := Limit{Rate: 1, Period: time.Hour, Burst: 10} // no refill within the test
	const budget, owed = 200 * time.Millisecond, 3
	for _, batching := range []int{0, 4} {
		for _, through := range []bool{false, true} {
			name := fmt.Sprintf("lost before Redis/batching=%d", batching)
			if through {
				name = fmt.Sprintf("answer lost after Redis applied it/batching=%d", batching)
			}
			t.Run(name, func(t *testing.T) {
				hook := &settleHook{through: through, budget: budget}
				rdb := redistest.NewClient(t, srv.Addr())
				rdb.AddHook(hook)
				lim, err := New(rdb, WithPrefix(uniquePrefix()), WithTimeout(budget), WithBatching(batching),
					WithFallbackReplicas(1), WithLogger(quietLogger()))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { lim.Close() })
				p, err := lim.plans.get([]Limit{limit})
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				ticks := lim.share(p).ticks
				lim.sendCharge(ctx, p, "warm", 1, ticks) // loads the script: one send per call below
				hook.seen.Store(0)
				hook.hold.Store(1)
				lim.sendCharge(ctx, p, "k", owed, ticks)
				sends := hook.seen.Load() // more than 2 if a real pause (under-load --stall) hit a send again
				var res Result
				byRedis(t, "Peek", func() (bool, error) { // Peek writes nothing: asked again after a pause
					var err error
					res, err = lim.Peek(ctx, "k", limit)
					return answered(res, err)
				})
				if want := limit.Burst - owed; res.Remaining != want || sends < 2 {
					t.Errorf("after a charge of %d whose first send timed out in a pause: %d settle sends, Remaining %d; want 2 sends or more, Remaining %d (charged once)",
						owed, sends, res.Remaining, want)
				}
			})
		}
	}
}
