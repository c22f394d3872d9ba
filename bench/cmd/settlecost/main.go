// Command settlecost measures what charging by the result costs: the
// decisions a second and the Redis work of a plain decision (AllowN)
// against a reservation settled by its result (Reserve, then Settle with a
// different final cost, as a refunded login or a metered LLM call is),
// on a private redis-server, in the same run.
//
//	go run ./bench/cmd/settlecost [-callers 1,16] [-duration 2s] [-rounds 3]
//
// Each cell runs its callers for -duration on 1,000 keys; rounds alternate
// the modes so that noise on the machine spreads over both, and each
// figure is the median over the rounds. Redis CPU is INFO cpu's
// used_cpu_sys+used_cpu_user per request; EVALSHA µs is INFO
// commandstats' usec per script call, summed per request.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/core"
)

func main() {
	callers := flag.String("callers", "1,16", "comma-separated numbers of concurrent callers")
	duration := flag.Duration("duration", 2*time.Second, "measured time of each cell in each round")
	rounds := flag.Int("rounds", 3, "rounds over the cells; each figure is the median over them")
	flag.Parse()
	if err := run(*callers, *duration, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "settlecost:", err)
		os.Exit(1)
	}
}

// mode is one way of charging a request.
type mode struct {
	name string
	do   func(ctx context.Context, r *core.Rule, key string) error
}

var modes = []mode{
	{"AllowN (charged before)", func(ctx context.Context, r *core.Rule, key string) error {
		_, err := r.AllowN(ctx, key, 2)
		return err
	}},
	{"Reserve, then Settle", func(ctx context.Context, r *core.Rule, key string) error {
		rv, err := r.Reserve(ctx, key, 2)
		if err != nil {
			return err
		}
		if !rv.Result.Allowed {
			return errors.New("denied: the limit is meant never to deny")
		}
		return rv.Settle(ctx, 1)
	}},
}

// cell is one measurement.
type cell struct {
	perSec float64 // requests a second
	cpuUS  float64 // Redis CPU µs per request
	evalUS float64 // EVALSHA µs per request (commandstats)
	evals  float64 // EVALSHA calls per request
}

func run(callerList string, d time.Duration, rounds int) error {
	var ns []int
	for _, f := range strings.Split(callerList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-callers: %q is not a positive number", f)
		}
		ns = append(ns, n)
	}
	if d <= 0 || rounds < 1 {
		return errors.New("-duration and -rounds must be positive")
	}
	srv, err := bench.StartRedis("")
	if err != nil {
		return err
	}
	defer srv.Close()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 64})
	defer rdb.Close()
	lim, err := core.New(rdb, core.WithTimeout(time.Second))
	if err != nil {
		return err
	}
	defer lim.Close()
	rule, err := lim.Prepare(core.PerSecond(1 << 30))
	if err != nil {
		return err
	}
	got := map[[2]int][]cell{}
	for range rounds {
		for _, n := range ns {
			for mi, m := range modes {
				c, err := measure(ctx, rdb, rule, m, n, d)
				if err != nil {
					return fmt.Errorf("%s, %d callers: %w", m.name, n, err)
				}
				got[[2]int{n, mi}] = append(got[[2]int{n, mi}], c)
			}
		}
	}
	fmt.Printf("| callers | mode | requests/s | Redis CPU µs per request | EVALSHA µs per request | script calls per request |\n| ---: | --- | ---: | ---: | ---: | ---: |\n")
	for _, n := range ns {
		for mi, m := range modes {
			cs := got[[2]int{n, mi}]
			fmt.Printf("| %d | %s | %.0f | %.2f | %.2f | %.2f |\n", n, m.name,
				median(cs, func(c cell) float64 { return c.perSec }),
				median(cs, func(c cell) float64 { return c.cpuUS }),
				median(cs, func(c cell) float64 { return c.evalUS }),
				median(cs, func(c cell) float64 { return c.evals }))
		}
	}
	return nil
}

// measure runs m with n callers for d.
func measure(ctx context.Context, rdb *redis.Client, rule *core.Rule, m mode, n int, d time.Duration) (cell, error) {
	before, err := stats(ctx, rdb)
	if err != nil {
		return cell{}, err
	}
	var done atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for j := 0; time.Now().Before(stop); j++ {
				key := "k" + strconv.Itoa((i*7919+j)%1000)
				if err := m.do(ctx, rule, key); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return cell{}, err
	}
	after, err := stats(ctx, rdb)
	if err != nil {
		return cell{}, err
	}
	k := float64(done.Load())
	return cell{
		perSec: k / elapsed.Seconds(),
		cpuUS:  (after.cpu - before.cpu) * 1e6 / k,
		evalUS: float64(after.evalUS-before.evalUS) / k,
		evals:  float64(after.evals-before.evals) / k,
	}, nil
}

// snapshot is the server's counters at one time.
type snapshot struct {
	cpu    float64 // seconds
	evals  int64   // EVALSHA and EVAL calls
	evalUS int64   // their µs
}

func stats(ctx context.Context, rdb *redis.Client) (snapshot, error) {
	var s snapshot
	var err error
	if s.cpu, err = bench.UsedCPU(ctx, rdb); err != nil {
		return s, err
	}
	cs, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return s, err
	}
	for _, f := range bench.InfoFields(cs) {
		if f[0] != "cmdstat_evalsha" && f[0] != "cmdstat_eval" {
			continue
		}
		for _, kv := range strings.Split(f[1], ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				s.evals += n
			}
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				s.evalUS += n
			}
		}
	}
	return s, nil
}

func median(cs []cell, f func(cell) float64) float64 {
	v := make([]float64, len(cs))
	for i, c := range cs {
		v[i] = f(c)
	}
	slices.Sort(v)
	return v[len(v)/2]
}
