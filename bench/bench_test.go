package bench

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// The Go benchmarks give per-call cost and allocations of each limiter, on
// one goroutine and in parallel (RunParallel). The Redis-backed ones start a
// private redis-server and are skipped without one on PATH. The comparison
// across concurrency levels is cmd/compare's job.
//
//	go test -run '^$' -bench . -benchmem

var benchRedis struct {
	once sync.Once
	srv  *redistest.Server
	err  error
}

func redisForBench(b *testing.B) string {
	b.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		b.Skip("redis-server is not on PATH")
	}
	benchRedis.once.Do(func() { benchRedis.srv, benchRedis.err = StartRedis("") })
	if benchRedis.err != nil {
		b.Fatal(benchRedis.err)
	}
	return benchRedis.srv.Addr()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchRedis.srv != nil {
		_ = benchRedis.srv.Close()
	}
	os.Exit(code)
}

var benchKeys = func() []string {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "bench:" + strconv.Itoa(i)
	}
	return keys
}()

func BenchmarkAllow(b *testing.B) {
	lim := Limit{Rate: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000}
	for _, p := range Peers() {
		if p.DenyOnly {
			continue
		}
		for _, parallel := range []bool{false, true} {
			name := p.Name + "/serial"
			if parallel {
				name = p.Name + "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				env := Env{PoolSize: 64}
				if p.Redis {
					env.Addr = redisForBench(b)
				}
				built, err := p.New(env, lim)
				if err != nil {
					b.Skip(err)
				}
				defer built.Close()
				ctx := context.Background()
				b.ReportAllocs()
				if !parallel {
					i := 0
					for b.Loop() {
						if _, err := built.Limiter.Allow(ctx, benchKeys[i%len(benchKeys)]); err != nil {
							b.Fatal(err)
						}
						i++
					}
					return
				}
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						if _, err := built.Limiter.Allow(ctx, benchKeys[i%len(benchKeys)]); err != nil {
							b.Error(err)
							return
						}
						i += 7
					}
				})
			})
		}
	}
}
