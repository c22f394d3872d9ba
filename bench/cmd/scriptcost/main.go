// Command scriptcost measures what sluice's bucket script costs Redis per
// key, at several keys per call, against go-redis/redis_rate's script (one
// key per call), a script that only returns (the cost of an EVALSHA and its
// arguments, whatever the script does) and a script that does the same GET
// and SET per key without any arithmetic (the least a read-modify-write
// bucket can cost).
//
// Run from bench/:
//
//	go run ./cmd/scriptcost             # Redis CPU µs per key, from INFO (noisy)
//	go run ./cmd/scriptcost -callgrind  # instructions per key under valgrind (repeatable)
//	go run ./cmd/scriptcost -callgrind -sim  # and valgrind's simulated cache misses and mispredicted branches
//	go run ./cmd/scriptcost -paths -callgrind  # a path of 1-4 levels against one key with as many limits
//
// Every script decides the same limit, 1000 per second with a burst of a
// million (nothing is denied), on keys that already hold a bucket: each
// measurement first decides every key once, then measures -calls script
// calls cycling over them. sluice's and redis_rate's scripts and arguments
// are the ones the libraries send: each library is run once against a
// recording client that captures its EVALSHA. sluice sends the lone form
// of the arguments, with one key or several under the same limit, as
// described at the top of core/internal/redisstore/bucket.lua; with
// -batch-form, a call of several keys sends the batch form of one group
// instead (what sluice sent for them before 2026-11-29, and still sends
// for keys whose numbers differ).
//
// Each measurement gets its own redis-server (bench.StartRedis). With
// -callgrind it runs under `valgrind --tool=callgrind`; the counters are
// zeroed (callgrind_control -z) after the first pass, so the figure is the
// whole server's instructions during the measured calls, from reading the
// requests to writing the replies, divided by the keys decided. The server's
// cron runs once a second (CONFIG SET hz 1) so that its share stays small
// under valgrind's slowdown. Without -callgrind, the server is pinned to the
// first CPU (with taskset, when there are two or more) and measured with INFO
// cpu (the whole server) and INFO commandstats (usec_per_call of EVALSHA:
// the command alone), best of three passes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
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

// The limit every script decides: 1000 per second, burst 10^6. In sluice's
// ticks (core's compileLimit: rate and period in microseconds reduced by
// their gcd) that is r = 1, p = 1000, b = 10^6.
var (
	limitRate   = 1000
	limitPeriod = time.Second
	limitBurst  = 1_000_000
)

// batchArgs is the batch form of one group of one limit, cost 1, no wait
// and no penalty, for the limit above: nothing per key.
var batchArgs = []any{"1", "1", "0", "0", "1", "1", "1000", "1000000"}

type variant struct {
	name string
	src  string
	args func(k int) []any // the arguments of a call of k keys
	max  int               // the most keys per call; 0 for any
}

// keep is -keep: where to copy each callgrind output; empty for nowhere.
var keep *string

// batchForm is -batch-form: calls of several keys in the batch form.
var batchForm bool

// cacheSim is -sim: simulate the caches and branch predictor under
// callgrind.
var cacheSim bool

func main() {
	script := flag.String("script", "", "a bucket script to measure instead of the one the library sends (for example ../core/internal/redisstore/bucket.lua while editing it; its --#include lines are read from its directory, as the library splices them)")
	perCall := flag.String("keys-per-call", "1,10,32", "comma-separated numbers of keys decided per script call")
	calls := flag.Int("calls", 2000, "measured script calls per cell")
	nkeys := flag.Int("keys", 1000, "distinct keys the calls cycle over")
	useCallgrind := flag.Bool("callgrind", false, "count the server's instructions under valgrind instead of reading its CPU time")
	keep = flag.String("keep", "", "with -callgrind, copy each measurement's callgrind output into this folder (for callgrind_annotate)")
	paths := flag.Bool("paths", false, "measure a path of 1 to 4 levels (core.PathRule) against one key with as many limits, per decision")
	flag.BoolVar(&batchForm, "batch-form", false, "send calls of several keys in the batch form of one group, not the lone form")
	flag.BoolVar(&cacheSim, "sim", false, "with -callgrind, also simulate the caches and the branch predictor (valgrind's --cache-sim=yes --branch-sim=yes) and report, per key, the level-one instruction and data misses, the last-level misses and the mispredicted branches beside the instructions")
	flag.Parse()
	if *paths {
		if err := runPaths(*calls, *nkeys, *useCallgrind); err != nil {
			fmt.Fprintln(os.Stderr, "scriptcost:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*script, *perCall, *calls, *nkeys, *useCallgrind); err != nil {
		fmt.Fprintln(os.Stderr, "scriptcost:", err)
		os.Exit(1)
	}
}

func run(scriptPath, perCall string, calls, nkeys int, useCallgrind bool) error {
	var ks []int
	for _, f := range strings.Split(perCall, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return fmt.Errorf("-keys-per-call: %q is not a positive number", f)
		}
		ks = append(ks, k)
	}
	if calls < 1 || nkeys < 1 {
		return errors.New("-calls and -keys must be positive")
	}
	sl, err := sluiceCall()
	if err != nil {
		return err
	}
	if scriptPath != "" {
		src, err := readScript(scriptPath)
		if err != nil {
			return err
		}
		sl.src = src
	}
	rr, err := redisRateCall()
	if err != nil {
		return err
	}
	args := func(k int) []any {
		if k == 1 || !batchForm {
			return sl.args
		}
		return batchArgs
	}
	variants := []variant{
		{name: "noop", src: noop, args: args},
		{name: "floor (TIME, GET, SET)", src: floor, args: args},
		{name: "sluice", src: sl.src, args: args},
		{name: "redis_rate", src: rr.src, args: func(int) []any { return rr.args }, max: 1},
	}
	unit := "Redis CPU µs per key (INFO cpu) / EVALSHA µs per key (INFO commandstats usec_per_call)"
	if useCallgrind {
		unit = "instructions per key (callgrind)"
		if cacheSim {
			unit = "instructions / level-one instruction misses / level-one data misses / last-level misses / mispredicted branches, per key (callgrind --cache-sim=yes --branch-sim=yes: its simulated caches and predictor, not the host's)"
		}
	} else if cacheSim {
		return errors.New("-sim needs -callgrind")
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
			if v.max > 0 && k > v.max {
				row = append(row, "—")
				continue
			}
			if useCallgrind {
				x, err := instructions(v, k, calls, nkeys)
				if err != nil {
					return fmt.Errorf("%s at %d keys per call: %w", v.name, k, err)
				}
				if cacheSim {
					row = append(row, fmt.Sprintf("%.0f / %.0f / %.0f / %.1f / %.0f", x[0], x[3], x[4]+x[5], x[6]+x[7]+x[8], x[10]+x[12]))
				} else {
					row = append(row, fmt.Sprintf("%.0f", x[0]))
				}
			} else {
				cpu, cmd, err := cpuPerKey(v, k, calls, nkeys)
				if err != nil {
					return fmt.Errorf("%s at %d keys per call: %w", v.name, k, err)
				}
				row = append(row, fmt.Sprintf("%.2f / %.2f", cpu, cmd))
			}
		}
		fmt.Printf("| %s |\n", strings.Join(row, " | "))
	}
	flags := map[bool]string{true: " -callgrind"}[useCallgrind]
	if cacheSim {
		flags += " -sim"
	}
	if batchForm {
		flags += " -batch-form"
	}
	fmt.Printf("\n%s; %d calls per cell over %d keys; go run ./cmd/scriptcost%s\n", unit, calls, nkeys, flags)
	return nil
}

func mapInts(xs []int, f func(int) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// captured is one script call a library made.
type captured struct {
	src  string
	args []any
}

// recorder is a Scripter that answers EVALSHA with NOSCRIPT, so that
// go-redis's Script.Run sends EVAL with the script's source, and records
// that EVAL, answering it with reply.
type recorder struct {
	redis.Scripter // not called
	reply          []any
	got            *captured
}

func (r *recorder) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	c := redis.NewCmd(ctx)
	c.SetErr(redis.ErrNoScript)
	return c
}

func (r *recorder) Eval(ctx context.Context, src string, _ []string, args ...any) *redis.Cmd {
	r.got = &captured{src: src, args: args}
	c := redis.NewCmd(ctx)
	c.SetVal(r.reply)
	return c
}

func (r *recorder) Del(ctx context.Context, _ ...string) *redis.IntCmd {
	return redis.NewIntResult(0, nil)
}

// sluiceCall captures the script call of a lone sluice decision.
func sluiceCall() (*captured, error) {
	rec := &recorder{reply: []any{int64(1), int64(0), int64(0), int64(0), int64(0)}}
	lim, err := core.New(rec, core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return nil, err
	}
	_, err = lim.Allow(context.Background(), "k", core.Limit{Rate: limitRate, Period: limitPeriod, Burst: limitBurst})
	if rec.got == nil {
		return nil, fmt.Errorf("sluice made no script call (%v)", err)
	}
	return rec.got, nil
}

// redisRateCall captures the script call of a redis_rate decision.
func redisRateCall() (*captured, error) {
	rec := &recorder{reply: []any{int64(1), int64(0), "0", "0"}}
	_, err := redis_rate.NewLimiter(rec).Allow(context.Background(), "k", redis_rate.Limit{Rate: limitRate, Period: limitPeriod, Burst: limitBurst})
	if rec.got == nil {
		return nil, fmt.Errorf("redis_rate made no script call (%v)", err)
	}
	return rec.got, nil
}

// driver sends a variant's script calls to one server.
type driver struct {
	rdb   *redis.Client
	s     *redis.Script
	v     variant
	k     int
	nkeys int
	n     int // keys named so far
}

func newDriver(ctx context.Context, rdb *redis.Client, v variant, k, nkeys int) (*driver, error) {
	s := redis.NewScript(v.src)
	if err := s.Load(ctx, rdb).Err(); err != nil {
		return nil, err
	}
	return &driver{rdb: rdb, s: s, v: v, k: k, nkeys: nkeys}, nil
}

// warm decides every key once.
func (d *driver) warm(ctx context.Context) error {
	return d.drive(ctx, (d.nkeys+d.k-1)/d.k)
}

// drive sends calls script calls of k keys each, pipelined 100 at a time,
// cycling over the keys.
func (d *driver) drive(ctx context.Context, calls int) error {
	args := d.v.args(d.k)
	for i := 0; i < calls; i += 100 {
		pipe := d.rdb.Pipeline()
		for j := i; j < min(i+100, calls); j++ {
			keys := make([]string, d.k)
			for x := range keys {
				id := strconv.Itoa(d.n % d.nkeys)
				keys[x] = "sluice:{k" + id + "}f:k" + id
				d.n++
			}
			d.s.EvalSha(ctx, pipe, keys, args...)
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
// are two or more): the server's CPU time and EVALSHA's usec_per_call, per
// key, best of three passes each.
func cpuPerKey(v variant, k, calls, nkeys int) (cpu, cmd float64, err error) {
	pin := ""
	if runtime.GOOS == "linux" && runtime.NumCPU() >= 2 {
		pin = "0"
	}
	srv, err := bench.StartRedis(pin)
	if err != nil {
		return 0, 0, err
	}
	defer srv.Close()
	rdb := client(srv)
	defer rdb.Close()
	ctx := context.Background()
	d, err := newDriver(ctx, rdb, v, k, nkeys)
	if err != nil {
		return 0, 0, err
	}
	if err := d.warm(ctx); err != nil {
		return 0, 0, err
	}
	cpu, cmd = -1, -1
	for range 3 {
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			return 0, 0, err
		}
		before, err := bench.UsedCPU(ctx, rdb)
		if err != nil {
			return 0, 0, err
		}
		if err := d.drive(ctx, calls); err != nil {
			return 0, 0, err
		}
		after, err := bench.UsedCPU(ctx, rdb)
		if err != nil {
			return 0, 0, err
		}
		if x := (after - before) * 1e6 / float64(k*calls); cpu < 0 || x < cpu {
			cpu = x
		}
		usec, err := evalshaUsecPerCall(ctx, rdb)
		if err != nil {
			return 0, 0, err
		}
		if x := usec / float64(k); cmd < 0 || x < cmd {
			cmd = x
		}
	}
	return cpu, cmd, nil
}

// evalshaUsecPerCall reads usec_per_call of EVALSHA from INFO commandstats.
func evalshaUsecPerCall(ctx context.Context, rdb *redis.Client) (float64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for _, f := range bench.InfoFields(info) {
		if f[0] != "cmdstat_evalsha" {
			continue
		}
		for _, kv := range strings.Split(f[1], ",") {
			if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
				return strconv.ParseFloat(v, 64)
			}
		}
	}
	return 0, errors.New("no cmdstat_evalsha usec_per_call in INFO commandstats")
}

// instructions counts the server's instructions under callgrind during the
// measured calls, per key decided: callgrind's totals, each per key, the
// instructions first (with -sim, then its other events in its order: Dr
// Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim).
func instructions(v variant, k, calls, nkeys int) ([]float64, error) {
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		return nil, errors.New("-callgrind needs valgrind on PATH (apt-get install valgrind)")
	}
	ctl, err := exec.LookPath("callgrind_control")
	if err != nil {
		return nil, errors.New("-callgrind needs callgrind_control on PATH (it comes with valgrind)")
	}
	dir, err := os.MkdirTemp("", "scriptcost")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "callgrind.out")
	srv, err := redistest.Launch(redistest.ServerOptions{
		Prefix:       append([]string{vg, "--tool=callgrind", "--callgrind-out-file=" + out}, map[bool][]string{true: {"--cache-sim=yes", "--branch-sim=yes"}}[cacheSim]...),
		StartTimeout: 30 * time.Second, // valgrind is slow to start
		StopTimeout:  time.Minute,      // and to write its report
	})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	rdb := client(srv)
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "hz", "1").Err(); err != nil {
		return nil, err
	}
	d, err := newDriver(ctx, rdb, v, k, nkeys)
	if err != nil {
		return nil, err
	}
	if err := d.warm(ctx); err != nil {
		return nil, err
	}
	pid, err := serverPID(ctx, rdb)
	if err != nil {
		return nil, err
	}
	if msg, err := exec.Command(ctl, "-z", pid).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("callgrind_control -z %s: %v: %s", pid, err, msg)
	}
	if err := d.drive(ctx, calls); err != nil {
		return nil, err
	}
	rdb.Close()
	// A graceful stop (SIGTERM, which Redis treats as SHUTDOWN) lets
	// callgrind write its report; Close fails if it had to kill instead.
	if err := srv.Close(); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("no callgrind output: %w", err)
	}
	if *keep != "" {
		name := fmt.Sprintf("callgrind.%s.%d.out", strings.Fields(v.name)[0], k)
		if err := os.WriteFile(filepath.Join(*keep, name), data, 0o644); err != nil {
			return nil, err
		}
	}
	m := totals.FindSubmatch(data)
	if m == nil {
		return nil, errors.New("no total in the callgrind output")
	}
	var per []float64
	for _, f := range strings.Fields(string(m[1])) {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, err
		}
		per = append(per, float64(n)/float64(k*calls))
	}
	if cacheSim && len(per) < 13 {
		return nil, fmt.Errorf("callgrind's totals have %d events, not the 13 of --cache-sim=yes --branch-sim=yes", len(per))
	}
	return per, nil
}

// serverPID reads the server's process id (valgrind's, when it runs under
// valgrind) from INFO server.
func serverPID(ctx context.Context, rdb *redis.Client) (string, error) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, f := range bench.InfoFields(info) {
		if f[0] == "process_id" {
			return f[1], nil
		}
	}
	return "", errors.New("no process_id in INFO server")
}

// client returns a client for srv with room for a slow (valgrind) server.
func client(srv *redistest.Server) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute, DisableIdentity: true})
}

var totals = regexp.MustCompile(`(?m)^(?:summary|totals):((?: \d+)+)`)

// readScript reads the Lua file at path and splices in each file it names
// on an include line ("--#include arith.lua"), from the same directory, as
// core does with its own scripts.
func readScript(path string) (string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for line := range strings.Lines(string(src)) {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "--#include ")
		if !ok {
			b.WriteString(line)
			continue
		}
		part, err := os.ReadFile(filepath.Join(filepath.Dir(path), name))
		if err != nil {
			return "", fmt.Errorf("%s includes %s: %w", path, name, err)
		}
		b.Write(part)
	}
	return b.String(), nil
}
