package core

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/redistest"
)

// panicHook is a go-redis hook of the user's that panics on every command
// sent under a context marked with panicMark while on (not on the
// library's own background calls, whose panic would end the test).
type panicHook struct{ on atomic.Bool }

type panicMark struct{}

func (h *panicHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *panicHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && ctx.Value(panicMark{}) != nil {
			panic("a hook of the user's")
		}
		return next(ctx, cmd)
	}
}
func (h *panicHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestHookPanicKeepsNoSlot: a lone decision whose client's hook panics,
// recovered by the caller (as net/http recovers a handler's panic), gives
// its node's slot back. More panics than the node has slots, and the next
// decision is still Redis's, not the fallback's after its budget spent
// waiting for a slot nobody gives back.
func TestHookPanicKeepsNoSlot(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redistest.NewClient(t, srv.Addr())
	hook := &panicHook{}
	rdb.AddHook(hook)
	lim, err := New(rdb, WithPrefix(uniquePrefix()), WithBatching(2), WithFallbackReplicas(1), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	ctx := context.Background()
	limit := PerSecond(1000)
	if _, err := lim.Allow(ctx, "warm", limit); err != nil {
		t.Fatal(err)
	}
	hook.on.Store(true)
	marked := context.WithValue(ctx, panicMark{}, true)
	panics := 0
	for i := 0; i < 8; i++ {
		func() {
			defer func() {
				if recover() != nil {
					panics++
				}
			}()
			_, _ = lim.Allow(marked, "k", limit)
		}()
	}
	if panics != 8 {
		t.Fatalf("%d of 8 decisions reached the hook's panic", panics)
	}
	hook.on.Store(false)
	for i := 0; i < 4; i++ {
		res, err := lim.Allow(ctx, "k", limit)
		if err != nil || res.Degraded {
			t.Fatalf("decision %d after the panics: %+v, %v; want Redis's answer (a slot kept by a panic?)", i, res, err)
		}
	}
}
