package core

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
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

// BenchmarkPathShare is a whole decision on a real Redis, one caller at a
// time, of a path of two levels whose root is shared fairly among ten
// children with two classes (docs/fairshare.md), against the same path
// unshared. It reports Redis's CPU per decision, from INFO commandstats
// (evalsha's usec) read before and after each run, as redis-usec/op. Run
// it on a quiet machine, as bench/README.md says:
//
//	go test -run '^$' -bench PathShare -benchtime 200000x ./core
func BenchmarkPathShare(b *testing.B) {
	addr := redistest.Addr(b)
	rdb := redistest.NewClient(b, addr)
	lim, err := New(rdb, WithPrefix(fmt.Sprintf("sharebench%d:", time.Now().UnixNano())), WithTimeout(time.Second),
		WithFallbackReplicas(1), WithDenyCache(false), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	limit := PerSecond(1 << 30)
	tenants := make([]string, 10)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("t%d", i)
	}
	for _, shared := range []bool{false, true} {
		root := Level{Name: "upstream", Limits: []Limit{limit}}
		if shared {
			root.Share = &Share{Fair: true, Classes: []Class{{Name: "critical", Reserve: 0.2}, {Name: "rest"}}}
		}
		pr, err := lim.PreparePath(fmt.Sprint("bench", shared), root, Level{Name: "tenant", Limits: []Limit{limit}})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("shared=%v", shared), func(b *testing.B) {
			usec := func() float64 {
				info, err := rdb.Info(ctx, "commandstats").Result()
				if err != nil {
					b.Fatal(err)
				}
				_, rest, _ := strings.Cut(info, "cmdstat_evalsha:")
				_, rest, _ = strings.Cut(rest, "usec=")
				v, _, _ := strings.Cut(rest, ",")
				n, _ := strconv.ParseFloat(v, 64)
				return n
			}
			before := usec()
			i := 0
			for b.Loop() {
				if _, err := pr.Allow(ctx, "upstream", tenants[i%len(tenants)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric((usec()-before)/float64(b.N), "redis-usec/op")
		})
	}
}
