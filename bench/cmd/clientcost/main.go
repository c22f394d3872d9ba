// Command clientcost measures what a lone decision costs the process that
// asks for it: the instructions it runs (counted by callgrind, so the
// figure repeats whatever else the machine is doing) and the system calls
// it makes (counted by strace), per decision, for each limiter named.
//
// Run from bench/:
//
//	go run ./cmd/clientcost                       # sluice, redis_rate and floor
//	go run ./cmd/clientcost -only sluice,redis_rate -calls 20000
//
// Each limiter is built as the fleet comparison builds one instance (see
// bench.Env's Production: docs/production.md's client options, a client
// of its own) and driven by one caller (or -callers at once) deciding
// -keys keys in turn at 1000/s burst 1000, never reached, so that every
// decision is admitted and written, as in the fleet's 10k-key scenario.
// One caller in one process is the shape where nothing can be batched:
// every decision is a round trip, and what differs between libraries is
// their own work around it. With -callers 2, the fleet's 32×2 instance,
// a decision should cost no more than alone.
//
// How: this program runs itself once per limiter as a child, under
// `valgrind --tool=callgrind`, with its own redis-server (bench.StartRedis)
// on the first CPU when there are two. The child builds the limiter,
// decides every key once, and says so; the parent zeroes callgrind's
// counters (callgrind_control -z), lets the child make -calls decisions,
// and dumps the counters (callgrind_control -d) when it says it is done.
// The instructions are the whole child's, every thread's (the runtime's
// scheduler, network poller and collector included), in user space: the
// kernel's side of each system call is not in them. For those, the child
// runs twice more under `strace -f -c`, with -calls decisions and with
// none, and the difference is divided by -calls: write and recvfrom (the
// pool's health check) are fixed per decision, while reads that find
// nothing yet, epoll waits, futexes and the runtime's sleeps depend on
// timing. Every child runs with GOMAXPROCS=1, as the fleet's worker
// processes do (with two, an idle processor's spinning makes the count
// swing by a third from run to run), and GODEBUG=asyncpreemptoff=1 (under
// valgrind the runtime's preemption signals are not reliably delivered)
// with cpu.rdtscp=off (on some AMD hosts the runtime sees RDTSCP, which
// valgrind 3.19 cannot run, and the child dies of SIGILL at once),
// for every limiter alike. Three runs of 10,000 decisions agreed within
// 1% for sluice and redis_rate, 3% for floor. Time-driven work (a limiter's heartbeat, the
// runtime's monitor) is counted at valgrind's pace, tens of times slower
// than real, so it weighs more here than it does on the wire.
//
// With -cold BYTES the child writes over BYTES before each measured
// decision and callgrind simulates the caches, so that each decision
// starts cold, as in a worker process switched back onto a shared core;
// the lines it then misses, split by whose code they hold, measure its
// footprint (see cold.go):
//
//	go run ./cmd/clientcost -calls 2000 -cold 2097152
//	go run ./cmd/clientcost -only sluice -calls 2000 -cold 2097152 -cold-top 12
//
// -cold-top N lists the limiter's own functions that miss the most lines.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// The scenario's limit: 1000 a second, burst 1000 (the fleet's 10k-key
// scenario); never reached, since each key is decided once per -keys
// decisions.
var limit = bench.Limit{Rate: 1000, Period: time.Second, Burst: 1000}

// keep is -keep: where to copy each callgrind dump; empty for nowhere.
var keep *string

// cold is -cold: bytes the child writes over before each measured
// decision, so that each starts from cold caches (see cold.go); 0 for
// none.
var cold *int

// coldLines are the cold mode's lines, one per limiter, printed after the
// table.
var coldLines []string

func main() {
	only := flag.String("only", "sluice,redis_rate,floor", "comma-separated limiters (bench.Peers names) to measure")
	calls := flag.Int("calls", 10000, "decisions measured per limiter")
	nkeys := flag.Int("keys", 1000, "distinct keys the decisions cycle over")
	callers := flag.Int("callers", 1, "callers sharing the limiter instance, deciding at once (the fleet's C in N×C)")
	child := flag.String("child", "", "internal: run as the child measuring this limiter")
	addr := flag.String("addr", "", "internal: the child's Redis")
	keep = flag.String("keep", "", "copy each limiter's callgrind dump into this folder (for callgrind_annotate)")
	cold = flag.Int("cold", 0, "with callgrind's cache simulation (L1 32 KiB, last level 1 MiB), write over this many bytes before each decision and count the decision's cache misses from cold (e.g. 2097152)")
	coldTop = flag.Int("cold-top", 0, "with -cold, list this many of the limiter's own functions by the instruction lines a cold decision misses in them")
	flag.Parse()
	if *child != "" {
		if err := runChild(*child, *addr, *calls, *nkeys, *callers); err != nil {
			fmt.Fprintln(os.Stderr, "clientcost child:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(strings.Split(*only, ","), *calls, *nkeys, *callers); err != nil {
		fmt.Fprintln(os.Stderr, "clientcost:", err)
		os.Exit(1)
	}
}

// peer returns the limiter named name.
func peer(name string) (bench.Peer, error) {
	for _, p := range bench.Peers() {
		if p.Name == name {
			if !p.Redis {
				return p, fmt.Errorf("%s keeps no state in Redis: nothing to measure here", name)
			}
			return p, nil
		}
	}
	return bench.Peer{}, fmt.Errorf("no limiter named %q (see bench.Peers)", name)
}

func run(names []string, calls, nkeys, callers int) error {
	if calls < 1 || nkeys < 1 || callers < 1 {
		return errors.New("-calls, -keys and -callers must be positive")
	}
	if calls%callers != 0 {
		return fmt.Errorf("-calls (%d) must be a multiple of -callers (%d)", calls, callers)
	}
	for i, n := range names {
		names[i] = strings.TrimSpace(n)
		if _, err := peer(names[i]); err != nil {
			return err
		}
	}
	for _, tool := range []string{"valgrind", "callgrind_control", "strace"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("needs %s on PATH (apt-get install valgrind strace)", tool)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cpu := ""
	if runtime.NumCPU() >= 2 {
		cpu = "0"
	}
	fmt.Printf("| limiter | instructions per decision | system calls per decision |\n| --- | ---: | ---: |\n")
	for _, name := range names {
		srv, err := bench.StartRedis(cpu)
		if err != nil {
			return err
		}
		c := child{self: self, name: name, addr: srv.Addr(), nkeys: nkeys, callers: callers}
		ins, err := c.instructions(calls)
		var sys map[string]float64
		if err == nil {
			sys, err = c.syscalls(calls)
		}
		_ = srv.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Printf("| %s | %.0f | %s |\n", name, ins, syscallText(sys))
	}
	who := "one caller"
	if callers > 1 {
		who = fmt.Sprintf("%d callers at once", callers)
	}
	if len(coldLines) > 0 {
		fmt.Printf("\nFrom cold caches (-cold %d), per decision:\n\n%s", *cold, strings.Join(coldLines, ""))
	}
	fmt.Printf("\n%d decisions per limiter by %s over %d keys at %s, each limiter on a client of its own with docs/production.md's options; go run ./cmd/clientcost -callers %d\n", calls, who, nkeys, limit, callers)
	return nil
}

// syscallText lists the system calls per decision, most first, with their
// total.
func syscallText(sys map[string]float64) string {
	names := make([]string, 0, len(sys))
	total := 0.0
	for n, v := range sys {
		if v >= 0.005 {
			names = append(names, n)
		}
		total += v
	}
	sort.Slice(names, func(i, j int) bool { return sys[names[i]] > sys[names[j]] })
	parts := []string{fmt.Sprintf("%.2f:", total)}
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f", n, sys[n]))
	}
	return strings.Join(parts, " ")
}

// child is how one limiter's child runs: this program (self) measuring
// the limiter name on the Redis at addr.
type child struct {
	self, name, addr string
	nkeys, callers   int
}

// cmd returns the command that runs the child making calls decisions,
// with prefix (valgrind's or strace's command line) before it.
func (c child) cmd(prefix []string, calls int) *exec.Cmd {
	args := append(append([]string{}, prefix[1:]...), c.self, "-child", c.name, "-addr", c.addr,
		"-calls", strconv.Itoa(calls), "-keys", strconv.Itoa(c.nkeys), "-callers", strconv.Itoa(c.callers), "-cold", strconv.Itoa(*cold))
	cmd := exec.Command(prefix[0], args...)
	cmd.Env = append(os.Environ(), "GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off", "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	return cmd
}

// session drives a child through its two steps: ready (warmed up) and
// done (measured). atReady and atDone run when the child reaches each.
func session(cmd *exec.Cmd, atReady, atDone func(pid int) error) error {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	lines := bufio.NewScanner(stdout)
	step := func(want string, f func(int) error) error {
		// A peer's library may print lines of its own (go-zero's
		// package stat logs usage every minute once imported); they
		// go to stderr, and the steps are the child's only words.
		for {
			if !lines.Scan() {
				return fmt.Errorf("the child ended before %q", want)
			}
			got := lines.Text()
			if got == want {
				break
			}
			if got == "ready" || got == "done" {
				return fmt.Errorf("the child said %q, want %q", got, want)
			}
			fmt.Fprintln(os.Stderr, "clientcost: the child printed:", got)
		}
		if err := f(cmd.Process.Pid); err != nil {
			return err
		}
		_, err := io.WriteString(stdin, "\n")
		return err
	}
	err = step("ready", atReady)
	if err == nil {
		err = step("done", atDone)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	_ = stdin.Close()
	return cmd.Wait()
}

// totals matches the event total of a callgrind output.
var totals = regexp.MustCompile(`(?m)^(?:summary|totals): (\d+)`)

// instructions counts the child's instructions per measured decision
// under callgrind.
func (c child) instructions(calls int) (float64, error) {
	dir, err := os.MkdirTemp("", "clientcost")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "callgrind.out")
	// Names uncompressed: a compressed dump names an object at its first
	// use in the process, which may come before the counters are zeroed,
	// and the dump then never names the child's own binary (seen once in
	// three runs: every function read as "the rest").
	vg := []string{"valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, "--compress-strings=no"}
	if *cold > 0 {
		vg = append(vg, coldSims...)
	}
	cmd := c.cmd(vg, calls)
	ctl := func(flag string) func(int) error {
		return func(pid int) error {
			if msg, err := exec.Command("callgrind_control", flag, strconv.Itoa(pid)).CombinedOutput(); err != nil {
				return fmt.Errorf("callgrind_control %s: %v: %s", flag, err, msg)
			}
			return nil
		}
	}
	if err := session(cmd, ctl("-z"), ctl("-d")); err != nil {
		return 0, err
	}
	// The dump asked for at "done" is the first numbered one; the file
	// without a number is the rest, up to the child's exit.
	dumps, _ := filepath.Glob(out + ".*")
	sort.Strings(dumps)
	if len(dumps) == 0 {
		return 0, errors.New("callgrind wrote no dump")
	}
	data, err := os.ReadFile(dumps[0])
	if err != nil {
		return 0, err
	}
	if *keep != "" {
		if err := os.WriteFile(filepath.Join(*keep, "callgrind."+strings.ReplaceAll(c.name, "/", "-")+".out"), data, 0o644); err != nil {
			return 0, err
		}
	}
	m := totals.FindSubmatch(data)
	if m == nil {
		return 0, errors.New("no total in the callgrind dump")
	}
	n, err := strconv.ParseInt(string(m[1]), 10, 64)
	if *cold > 0 && err == nil {
		cs, err := readCosts(dumps[0], c.self)
		if err != nil {
			return 0, err
		}
		coldLines = append(coldLines, fmt.Sprintf("- %s: %s\n", c.name, coldReport(cs, calls)))
		n -= cs.event("main.evict", "Ir") // the table's count is the decisions' own
	}
	return float64(n) / float64(calls), err
}

// syscalls counts the child's system calls per measured decision: strace
// -c over a child making calls decisions, less one making none.
func (c child) syscalls(calls int) (map[string]float64, error) {
	count := func(n int) (map[string]int, error) {
		dir, err := os.MkdirTemp("", "clientcost")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "strace.txt")
		cmd := c.cmd([]string{"strace", "-f", "-c", "-o", out}, n)
		nop := func(int) error { return nil }
		if err := session(cmd, nop, nop); err != nil {
			return nil, err
		}
		return readStrace(out)
	}
	with, err := count(calls)
	if err != nil {
		return nil, err
	}
	without, err := count(0)
	if err != nil {
		return nil, err
	}
	per := map[string]float64{}
	for k, v := range with {
		if d := v - without[k]; d > 0 {
			per[k] = float64(d) / float64(calls)
		}
	}
	return per, nil
}

// straceRow matches a row of strace -c's table: the calls column and the
// system call's name (an errors column may sit between them).
var straceRow = regexp.MustCompile(`^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$`)

// readStrace reads strace -c's table: calls by system call.
func readStrace(path string) (map[string]int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	got := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		m := straceRow.FindStringSubmatch(line)
		if m == nil || m[2] == "total" {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		got[m[2]] += n
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("no system calls read from %s", path)
	}
	return got, nil
}

// runChild builds the limiter, decides every key once, and then, when
// the parent says so, runs the measured decisions, calls/callers by each
// caller at once.
func runChild(name, addr string, calls, nkeys, callers int) error {
	p, err := peer(name)
	if err != nil {
		return err
	}
	built, err := p.New(bench.Env{Addr: addr, PoolSize: bench.ProductionPoolSize, Production: true}, limit)
	if err != nil {
		return err
	}
	defer built.Close()
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	ctx := context.Background()
	// decide makes n decisions, from the from-th key on, stepping by step.
	decide := func(from, step, n int) error {
		for i := 0; i < n; i++ {
			k := (from + i*step) % nkeys
			ok, err := built.Limiter.Allow(ctx, keys[k])
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("a decision on %s was denied: the scenario's limit is never reached", keys[k])
			}
		}
		return nil
	}
	in := bufio.NewReader(os.Stdin)
	if err := decide(0, 1, nkeys); err != nil {
		return err
	}
	fmt.Println("ready")
	if _, err := in.ReadString('\n'); err != nil {
		return err
	}
	if *cold > 0 {
		inner := decide
		decide = func(from, step, n int) error {
			buf := make([]byte, *cold) // each caller its own, written alone
			for i := 0; i < n; i++ {
				evict(buf)
				if err := inner(from+i*step, step, 1); err != nil {
					return err
				}
			}
			return nil
		}
	}
	errs := make(chan error, callers)
	for c := 0; c < callers; c++ {
		go func() { errs <- decide(c, callers, calls/callers) }()
	}
	for c := 0; c < callers; c++ {
		if err := <-errs; err != nil {
			return err
		}
	}
	fmt.Println("done")
	_, err = in.ReadString('\n')
	return err
}

// evict writes a byte in each cache line of buf, pushing what a decision
// left in the caches out of them.
//
//go:noinline
func evict(buf []byte) {
	for i := 0; i < len(buf); i += 64 {
		buf[i]++
	}
}
