package core

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// BenchmarkPathVsLimits is a whole decision on a real Redis, one caller at
// a time: a path of 1 to 4 levels (one limit each) against one key with as
// many limits. Run it under flock, as bench/README.md says:
//
//	go test -run '^$' -bench PathVsLimits ./core
func BenchmarkPathVsLimits(b *testing.B) {
	rdb := redistest.NewClient(b, redistest.Addr(b))
	lim, err := New(rdb, WithPrefix(fmt.Sprintf("pathbench%d:", time.Now().UnixNano())), WithTimeout(time.Second),
		WithFallbackReplicas(1), WithDenyCache(false), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	limit := PerSecond(1 << 30)
	names := []string{"org", "team", "user", "key"}
	for depth := 1; depth <= 4; depth++ {
		var levels []Level
		var limits []Limit
		for i := range depth {
			levels = append(levels, Level{Name: names[i], Limits: []Limit{limit}})
			limits = append(limits, limit.WithName(names[i]))
		}
		pr, err := lim.PreparePath("bench", levels...)
		if err != nil {
			b.Fatal(err)
		}
		kr, err := lim.Prepare(limits...)
		if err != nil {
			b.Fatal(err)
		}
		path := names[:depth]
		b.Run(fmt.Sprintf("path/levels=%d", depth), func(b *testing.B) {
			for b.Loop() {
				if _, err := pr.Allow(ctx, path...); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("key/limits=%d", depth), func(b *testing.B) {
			for b.Loop() {
				if _, err := kr.Allow(ctx, "org"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
