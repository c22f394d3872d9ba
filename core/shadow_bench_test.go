package core

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/redistest"
)

// BenchmarkShadowAllow is one decision on a real Redis under one limit,
// with no, one and three shadow limits: what shadow limits cost a
// decision (one script call each, the batch form with them).
func BenchmarkShadowAllow(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redistest.NewClient(b, srv.Addr())
	lim, err := New(rdb, WithDenyCache(false), WithFallbackReplicas(1))
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	ctx := context.Background()
	base, err := lim.Prepare(PerSecond(1 << 30))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{0, 1, 3} {
		shadow := make([]Limit, n)
		for i := range shadow {
			shadow[i] = PerSecond(1000 * (i + 1))
		}
		r, err := base.WithShadowLimits(shadow...)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				if _, err := r.Allow(ctx, "k"+strconv.Itoa(i&1023)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
