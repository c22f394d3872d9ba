// Command scriptcost measures what sluice's bucket script costs Redis per
// key, at several keys per call, against a script that only returns (the
// cost of an EVALSHA and its arguments, whatever the script does) and a
// script that does the same GET and SET per key without any arithmetic (the
// least a read-modify-write bucket can cost).
//
// Run from bench/:
//
//	go run ./cmd/scriptcost             # Redis CPU µs per key, from INFO (noisy)
//	go run ./cmd/scriptcost -callgrind  # instructions per key under valgrind (repeatable)
//
// Each measurement gets its own redis-server (bench.StartRedis). With
// -callgrind it runs under `valgrind --tool=callgrind`, and the figure is the
// server's instructions from start to shutdown divided by the keys decided,
// so start-up is spread thin but included; compare variants, not absolute
// numbers. Without it, the server is pinned to the first CPU (with taskset,
// when there are two or more) and measured with INFO cpu, best of three
// passes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bench"
)

// noop costs an EVALSHA with its keys and arguments and a one-value reply
// per key: the part of every script call no script body can avoid.
const noop = `local out = {}
for k = 1, #KEYS do out[k] = 1 end
return out`

// floor reads and writes each key as the bucket script does, with a fixed
// value and expiry and no arithmetic: what the body costs beyond noop is
// the two commands.
const floor = `redis.call('TIME')
local out = {}
for k = 1, #KEYS do
  redis.call('GET', KEYS[k])
  redis.call('SET', KEYS[k], '0 1790000000000000 0', 'PX', 3600000)
  out[k] = 1
end
return out`

type variant struct {
	name string
	src  string
}

func main() {
	script := flag.String("script", "../core/bucket.lua", "the bucket script to measure")
	perCall := flag.String("keys-per-call", "1,10,32", "comma-separated numbers of keys decided per script call")
	calls := flag.Int("calls", 2000, "script calls per measurement")
	useCallgrind := flag.Bool("callgrind", false, "count the server's instructions under valgrind instead of reading its CPU time")
	flag.Parse()
	if err := run(*script, *perCall, *calls, *useCallgrind); err != nil {
		fmt.Fprintln(os.Stderr, "scriptcost:", err)
		os.Exit(1)
	}
}

func run(scriptPath, perCall string, calls int, useCallgrind bool) error {
	src, err := os.ReadFile(scriptPath)
	if err != nil {
		return err
	}
	var ks []int
	for _, f := range strings.Split(perCall, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return fmt.Errorf("-keys-per-call: %q is not a positive number", f)
		}
		ks = append(ks, k)
	}
	if calls < 1 {
		return errors.New("-calls must be positive")
	}
	variants := []variant{{"noop", noop}, {"floor (TIME, GET, SET)", floor}, {"sluice", string(src)}}
	unit := "Redis CPU µs per key"
	if useCallgrind {
		unit = "instructions per key (callgrind)"
	}
	fmt.Printf("| script | %s |\n| --- |", strings.Join(mapInts(ks, func(k int) string {
		if k == 1 {
			return "1 key per call"
		}
		return fmt.Sprintf("%d keys per call", k)
	}), " | "))
	fmt.Print(strings.Repeat(" ---: |", len(ks)), "\n")
	for _, v := range variants {
		row := []string{v.name}
		for _, k := range ks {
			var x float64
			if useCallgrind {
				x, err = instructions(v, k, calls)
			} else {
				x, err = cpuPerKey(v, k, calls)
			}
			if err != nil {
				return fmt.Errorf("%s at %d keys per call: %w", v.name, k, err)
			}
			if useCallgrind {
				row = append(row, fmt.Sprintf("%.0f", x))
			} else {
				row = append(row, fmt.Sprintf("%.2f", x))
			}
		}
		fmt.Printf("| %s |\n", strings.Join(row, " | "))
	}
	fmt.Printf("\n%s; %d calls per cell; go run ./cmd/scriptcost%s\n", unit, calls, map[bool]string{true: " -callgrind"}[useCallgrind])
	return nil
}

func mapInts(xs []int, f func(int) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// args are the script arguments for a batch of keys under one limit of
// 10^6 per second, burst 10^9: one group, nothing per key.
func args() []any { return []any{"1", "1", "0", "0", "1", "1000000", "1", "1000000000"} }

// drive sends calls script calls of k keys each, pipelined 100 at a time,
// cycling over 10,000 keys.
func drive(ctx context.Context, rdb *redis.Client, src string, k, calls int) error {
	s := redis.NewScript(src)
	if err := s.Load(ctx, rdb).Err(); err != nil {
		return err
	}
	n := 0
	for i := 0; i < calls; i += 100 {
		pipe := rdb.Pipeline()
		for j := i; j < min(i+100, calls); j++ {
			keys := make([]string, k)
			for x := range keys {
				keys[x] = "sluice:{k" + strconv.Itoa(n%10_000) + "}f:k" + strconv.Itoa(n%10_000)
				n++
			}
			s.EvalSha(ctx, pipe, keys, args()...)
		}
		cmds, err := pipe.Exec(ctx)
		if err != nil {
			for _, c := range cmds {
				if c.Err() != nil {
					return c.Err()
				}
			}
			return err
		}
	}
	return nil
}

// cpuPerKey measures on a redis-server pinned to the first CPU (when there
// are two or more): best of three passes.
func cpuPerKey(v variant, k, calls int) (float64, error) {
	cpu := ""
	if runtime.GOOS == "linux" && runtime.NumCPU() >= 2 {
		cpu = "0"
	}
	srv, err := bench.StartRedis(cpu)
	if err != nil {
		return 0, err
	}
	defer srv.Stop()
	rdb := client(srv)
	defer rdb.Close()
	ctx := context.Background()
	best := -1.0
	for range 3 {
		before, err := bench.UsedCPU(ctx, rdb)
		if err != nil {
			return 0, err
		}
		if err := drive(ctx, rdb, v.src, k, calls); err != nil {
			return 0, err
		}
		after, err := bench.UsedCPU(ctx, rdb)
		if err != nil {
			return 0, err
		}
		if x := (after - before) * 1e6 / float64(k*calls); best < 0 || x < best {
			best = x
		}
	}
	return best, nil
}

// instructions counts the server's instructions under callgrind, from
// start to shutdown, per key decided.
func instructions(v variant, k, calls int) (float64, error) {
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		return 0, errors.New("-callgrind needs valgrind on PATH (apt-get install valgrind)")
	}
	dir, err := os.MkdirTemp("", "scriptcost")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "callgrind.out")
	srv, err := bench.StartRedisUnder(vg, "--tool=callgrind", "--callgrind-out-file="+out)
	if err != nil {
		return 0, err
	}
	defer srv.Stop()
	rdb := client(srv)
	err = drive(context.Background(), rdb, v.src, k, calls)
	rdb.Close()
	if err != nil {
		return 0, err
	}
	if err := srv.Shutdown(time.Minute); err != nil {
		return 0, err
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return 0, fmt.Errorf("no callgrind output: %w", err)
	}
	m := totals.FindSubmatch(data)
	if m == nil {
		return 0, errors.New("no total in the callgrind output")
	}
	total, err := strconv.ParseInt(string(m[1]), 10, 64)
	return float64(total) / float64(k*calls), err
}

// client returns a client for srv with room for a slow (valgrind) server.
func client(srv *bench.RedisServer) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: time.Minute, DisableIdentity: true})
}

var totals = regexp.MustCompile(`(?m)^(?:summary|totals): (\d+)`)
