package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// The multi-process fleet layout re-executes this program as worker
// processes, each running its share of the instances. The protocol is one
// JSON value per line:
//
//	parent → worker: a workerSpec; later the line "go"
//	worker → parent: a workerReady once its instances are built and warmed
//	                 up; a workerResult once it has measured
//
// A worker exits when its stdin ends before it is done (the parent died or
// gave up), when it outlives the lifetime given on its command line, and,
// on Linux, when the parent dies (bench.ChildAttr). CPU affinity is
// inherited, so workers run where the parent was pinned.

// workerArg, as the first argument, makes this program a fleet worker. It
// is not a flag of the comparison and is not listed by -h.
const workerArg = "-fleet-worker"

// goLine starts a worker's measurement.
const goLine = "go"

// Bounds on the parent's wait for its workers.
const (
	readyWithin = 30 * time.Second // building the instances and warming up
	resultGrace = 30 * time.Second // beyond the measured time
	lifeGrace   = 2 * time.Minute  // a worker's lifetime beyond warm-up and measurement
)

// workerSpec is what one worker runs.
type workerSpec struct {
	Peer      string        `json:"peer"`
	Addr      string        `json:"addr"`
	Limit     bench.Limit   `json:"limit"`
	KeyPrefix string        `json:"key_prefix"`
	WarmApart bool          `json:"warm_apart"` // warm up on other keys (see fleetScenario.warmApart)
	Keys      int           `json:"keys"`
	Instances int           `json:"instances"`
	Callers   int           `json:"callers"` // per instance
	Warmup    time.Duration `json:"warmup"`
	Duration  time.Duration `json:"duration"`
	Seed      uint64        `json:"seed"` // of the callers' key choices
	Slot      time.Duration `json:"slot"` // count calls per slot of this width; 0: not
}

// workerReady says a worker is ready to measure, or why it cannot.
type workerReady struct {
	Err        string `json:"err,omitempty"`
	CPUs       string `json:"cpus,omitempty"` // the CPUs it may run on
	GOMAXPROCS int    `json:"gomaxprocs"`
}

// workerResult is a worker's measurement: its tally, and the CPU time the
// worker process used over it (-1 if unknown).
type workerResult struct {
	Allowed  uint64           `json:"allowed"`
	Denied   uint64           `json:"denied"`
	Degraded uint64           `json:"degraded"`
	AdmitDeg uint64           `json:"admitted_degraded"`
	Errs     uint64           `json:"errors"`
	FirstErr string           `json:"first_error,omitempty"`
	Elapsed  time.Duration    `json:"elapsed"`
	CPU      float64          `json:"cpu_seconds"`
	Hist     *bench.Histogram `json:"latency"`
	Begin    int64            `json:"begin_unix_nano"`   // slot 0's start
	SentIn   []uint32         `json:"sent_in,omitempty"` // calls sent per slot (workerSpec.Slot)
	BackIn   []uint32         `json:"back_in,omitempty"` // calls returned per slot
}

func resultOf(t *tally, cpu float64) workerResult {
	r := workerResult{Allowed: t.allowed, Denied: t.denied, Degraded: t.degraded, AdmitDeg: t.admitDeg,
		Errs: t.errs, Elapsed: t.elapsed, CPU: cpu, Hist: &t.hist, Begin: t.begin.UnixNano(), SentIn: t.sentIn, BackIn: t.backIn}
	if t.firstErr != nil {
		r.FirstErr = t.firstErr.Error()
	}
	return r
}

func (r *workerResult) tally() *tally {
	t := &tally{allowed: r.Allowed, denied: r.Denied, degraded: r.Degraded, admitDeg: r.AdmitDeg,
		errs: r.Errs, elapsed: r.Elapsed, begin: time.Unix(0, r.Begin), sentIn: r.SentIn, backIn: r.BackIn}
	if r.FirstErr != "" {
		t.firstErr = errors.New(r.FirstErr)
	}
	if r.Hist != nil {
		t.hist = *r.Hist
	}
	return t
}

// workerMain runs this process as a fleet worker on stdin and stdout;
// args are the arguments after workerArg: its lifetime.
// workerProfileEnv passes -cpuprofile's path to the worker processes.
const workerProfileEnv = "COMPARE_WORKER_CPUPROFILE"

func workerMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "compare worker: want one argument, the lifetime")
		return 2
	}
	life, err := time.ParseDuration(args[0])
	if err != nil || life <= 0 {
		fmt.Fprintln(os.Stderr, "compare worker: bad lifetime:", args[0])
		return 2
	}
	if path := os.Getenv(workerProfileEnv); path != "" {
		f, err := os.Create(fmt.Sprintf("%s.worker-%d", path, os.Getpid()))
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "compare worker: -cpuprofile:", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	time.AfterFunc(life, func() {
		fmt.Fprintf(os.Stderr, "compare worker: still running after %s, exiting\n", life)
		os.Exit(3)
	})
	var done atomic.Bool
	lines := readLines(os.Stdin, func() {
		if !done.Load() {
			os.Exit(3) // the parent is gone
		}
	})
	err = serveWorker(lines, os.Stdout, buildWorkerFleet)
	done.Store(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare worker:", err)
		return 1
	}
	return 0
}

// readLines sends r's lines on the returned channel, and calls atEnd and
// closes the channel when r ends.
func readLines(r io.Reader, atEnd func()) <-chan string {
	ch := make(chan string)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
		atEnd()
		close(ch)
	}()
	return ch
}

// serveWorker is a worker's side of the protocol: read the spec from lines,
// build and warm up the instances, say so on out, wait for "go", measure,
// and write the result.
func serveWorker(lines <-chan string, out io.Writer, build func(workerSpec) ([]bench.Limiter, func(), error)) error {
	line, ok := <-lines
	if !ok {
		return errors.New("stdin ended before the spec")
	}
	var spec workerSpec
	if err := json.Unmarshal([]byte(line), &spec); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	enc := json.NewEncoder(out)
	lims, closeAll, err := build(spec)
	if err != nil {
		return errors.Join(err, enc.Encode(workerReady{Err: err.Error()}))
	}
	defer closeAll()
	keys := makeKeys(spec.KeyPrefix, spec.Keys)
	warm := keys
	if spec.WarmApart {
		warm = makeKeys(spec.KeyPrefix+"warm:", spec.Keys)
	}
	loadAll(lims, warm, spec.Callers, spec.Warmup, 0, spec.Seed)
	if err := enc.Encode(workerReady{CPUs: affinity(), GOMAXPROCS: runtime.GOMAXPROCS(0)}); err != nil {
		return err
	}
	if line, ok := <-lines; !ok || line != goLine {
		return fmt.Errorf("got %q instead of %q", line, goLine)
	}
	cpu0, cpuOK := processCPU()
	t, _ := loadAll(lims, keys, spec.Callers, spec.Duration, spec.Slot, spec.Seed)
	cpu1, _ := processCPU()
	cpu := -1.0
	if cpuOK {
		cpu = cpu1 - cpu0
	}
	return enc.Encode(resultOf(t, cpu))
}

// buildWorkerFleet builds a worker's instances of the peer its spec names.
func buildWorkerFleet(spec workerSpec) ([]bench.Limiter, func(), error) {
	for _, p := range bench.Peers() {
		if p.Name == spec.Peer {
			env := fleetEnv(spec.Addr)
			return newFleet(spec.Instances, func() (*bench.Built, error) { return p.New(env, spec.Limit) })
		}
	}
	return nil, nil, fmt.Errorf("no limiter %q", spec.Peer)
}

// workerCount is how many worker processes share a fleet of shape s: one
// per instance, at most most.
func workerCount(s shape, most int) int { return min(s.n, most) }

// workerShare is how many of n instances worker k of p runs.
func workerShare(n, p, k int) int {
	if k < n%p {
		return n/p + 1
	}
	return n / p
}

// worker is the parent's handle on a worker process.
type worker struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	dec *json.Decoder
}

// startWorker starts a worker process and sends it spec.
func startWorker(spec workerSpec) (*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	life := spec.Warmup + spec.Duration + lifeGrace
	cmd := exec.Command(exe, workerArg, life.String())
	cmd.SysProcAttr = bench.ChildAttr()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &worker{cmd: cmd, in: in, dec: json.NewDecoder(out)}
	if err := json.NewEncoder(in).Encode(spec); err != nil {
		w.stop()
		return nil, err
	}
	return w, nil
}

// recv reads the worker's next message into v, waiting at most within; a
// worker that does not answer in time is killed.
func (w *worker) recv(v any, within time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- w.dec.Decode(v) }()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		_ = w.cmd.Process.Kill()
		<-done
		return fmt.Errorf("worker %d did not answer within %s", w.cmd.Process.Pid, within)
	}
}

// stop closes the worker's stdin, which ends it, and waits for it to exit,
// killing it after a few seconds.
func (w *worker) stop() {
	_ = w.in.Close()
	exited := make(chan struct{})
	go func() { _ = w.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = w.cmd.Process.Kill()
		<-exited
	}
}

// fleetProcesses measures a fleet whose instances are spread over worker
// processes, started together once all are ready.
func (h *harness) fleetProcesses(sc fleetScenario, s shape, p bench.Peer) (fleetRun, error) {
	ws, err := h.startWorkers(sc, s, p)
	defer func() {
		for _, w := range ws {
			w.stop()
		}
	}()
	if err != nil {
		return fleetRun{}, err
	}
	return h.aroundRedis(func() (*tally, float64, error) { return runWorkers(ws, h.cfg.fleetDuration+resultGrace, sc.slot()) })
}

// startWorkers starts the workers of one fleet cell and waits until each
// has built and warmed up its instances. It returns the workers started
// even on error, for the caller to stop.
func (h *harness) startWorkers(sc fleetScenario, s shape, p bench.Peer) ([]*worker, error) {
	n := workerCount(s, h.cfg.fleetProcs)
	prefix := h.keyPrefix()
	var ws []*worker
	for k := range n {
		w, err := startWorker(workerSpec{Peer: p.Name, Addr: h.env.Addr, Limit: sc.limit,
			KeyPrefix: prefix, WarmApart: sc.warmApart, Keys: sc.nkeys, Instances: workerShare(s.n, n, k), Callers: s.c,
			Warmup: fleetWarmup, Duration: h.cfg.fleetDuration, Seed: uint64(k) << 32, Slot: sc.slot()})
		if err != nil {
			return ws, err
		}
		ws = append(ws, w)
	}
	for _, w := range ws {
		var r workerReady
		if err := w.recv(&r, readyWithin); err != nil {
			return ws, err
		}
		if r.Err != "" {
			return ws, errors.New(r.Err)
		}
		if h.pinned.GoCPUs != "" && r.CPUs != h.pinned.GoCPUs {
			return ws, fmt.Errorf("a worker runs on CPUs %s, not the benchmark's %s", r.CPUs, h.pinned.GoCPUs)
		}
		h.workerPlace = fmt.Sprintf("CPU %s, GOMAXPROCS %d", r.CPUs, r.GOMAXPROCS)
	}
	return ws, nil
}

// runWorkers starts the workers' measurement and gathers their results:
// the merged tally (elapsed is the longest worker's; calls per slot of
// width slot, if the workers counted them, on the earliest worker's
// slots) and the CPU time the workers used in all (-1 if one could not
// read its own).
func runWorkers(ws []*worker, within, slot time.Duration) (*tally, float64, error) {
	for _, w := range ws {
		if _, err := io.WriteString(w.in, goLine+"\n"); err != nil {
			return nil, 0, err
		}
	}
	total := new(tally)
	cpu := 0.0
	var parts []*tally
	for _, w := range ws {
		var r workerResult
		if err := w.recv(&r, within); err != nil {
			return nil, 0, err
		}
		parts = append(parts, r.tally())
		if r.CPU < 0 || cpu < 0 {
			cpu = -1
		} else {
			cpu += r.CPU
		}
	}
	// The workers began within a few milliseconds of one another: their
	// slots are laid on the earliest one's.
	for _, t := range parts {
		if total.begin.IsZero() || t.begin.Before(total.begin) {
			total.begin = t.begin
		}
	}
	for _, t := range parts {
		if slot > 0 {
			k := int(t.begin.Sub(total.begin) / slot)
			t.sentIn, t.backIn = shiftSlots(t.sentIn, k), shiftSlots(t.backIn, k)
		}
		total.add(t)
		total.elapsed = max(total.elapsed, t.elapsed)
	}
	return total, cpu, nil
}
