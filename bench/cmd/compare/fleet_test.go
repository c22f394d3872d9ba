package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
)

func TestMedian(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{5}, 5},
		{[]float64{4, 1}, 2.5},
		{[]float64{nan, 7, 1, 9}, 7},
	}
	for _, tt := range tests {
		if got := median(tt.xs); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.xs, got, tt.want)
		}
	}
	if got := median([]float64{nan}); !math.IsNaN(got) {
		t.Errorf("median of NaN alone = %v, want NaN", got)
	}
}

func TestParseShapes(t *testing.T) {
	got, err := parseShapes("64x1, 8×8,1x64")
	if err != nil {
		t.Fatal(err)
	}
	if want := []shape{{64, 1}, {8, 8}, {1, 64}}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"", "8", "0x4", "4x", "ax2"} {
		if _, err := parseShapes(bad); err == nil {
			t.Errorf("parseShapes(%q): no error", bad)
		}
	}
}

func TestWorkerShare(t *testing.T) {
	for _, s := range []shape{{64, 1}, {32, 2}, {8, 8}, {1, 64}, {7, 1}} {
		p := workerCount(s, 4)
		sum := 0
		for k := range p {
			n := workerShare(s.n, p, k)
			if n < s.n/p || n > s.n/p+1 {
				t.Errorf("%s: worker %d of %d runs %d instances", s, k, p, n)
			}
			sum += n
		}
		if sum != s.n {
			t.Errorf("%s: workers run %d instances in all", s, sum)
		}
	}
}

// yes admits everything at once.
type yes struct{}

func (yes) Allow(context.Context, string) (bool, error) { return true, nil }

// serve runs serveWorker on the given input lines with build, and returns
// what it wrote, line by line.
func serve(t *testing.T, lines []string, build func(workerSpec) ([]bench.Limiter, func(), error)) ([]json.RawMessage, error) {
	t.Helper()
	in := make(chan string, len(lines))
	for _, l := range lines {
		in <- l
	}
	close(in)
	var out bytes.Buffer
	err := serveWorker(in, &out, build)
	var msgs []json.RawMessage
	dec := json.NewDecoder(&out)
	for dec.More() {
		var m json.RawMessage
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	return msgs, err
}

func TestWorkerProtocol(t *testing.T) {
	spec := workerSpec{Peer: "fake", KeyPrefix: "k:", Keys: 10, Instances: 3, Callers: 2,
		Warmup: time.Millisecond, Duration: 5 * time.Millisecond, Seed: 1 << 32}
	line, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var got workerSpec
	closed := false
	msgs, err := serve(t, []string{string(line), goLine}, func(s workerSpec) ([]bench.Limiter, func(), error) {
		got = s
		return []bench.Limiter{yes{}, yes{}, yes{}}, func() { closed = true }, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != spec {
		t.Errorf("the worker built %+v, want %+v", got, spec)
	}
	if !closed {
		t.Error("the worker did not close its limiters")
	}
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want ready and result", len(msgs))
	}
	var ready workerReady
	if err := json.Unmarshal(msgs[0], &ready); err != nil || ready.Err != "" || ready.GOMAXPROCS < 1 {
		t.Errorf("ready = %s (%v)", msgs[0], err)
	}
	var res workerResult
	if err := json.Unmarshal(msgs[1], &res); err != nil {
		t.Fatal(err)
	}
	tl := res.tally()
	if tl.allowed == 0 || tl.denied+tl.degraded+tl.errs != 0 || tl.hist.Count() != tl.allowed || tl.elapsed < spec.Duration {
		t.Errorf("result: %d allowed, %d other, %d latencies, elapsed %s", tl.allowed, tl.denied+tl.degraded+tl.errs, tl.hist.Count(), tl.elapsed)
	}
}

func TestWorkerBuildError(t *testing.T) {
	msgs, err := serve(t, []string{`{"peer":"fake"}`}, func(workerSpec) ([]bench.Limiter, func(), error) {
		return nil, nil, errors.New("cannot express the limit")
	})
	if err == nil {
		t.Error("no error from a failed build")
	}
	var ready workerReady
	if len(msgs) != 1 || json.Unmarshal(msgs[0], &ready) != nil || ready.Err != "cannot express the limit" {
		t.Errorf("messages %s, want one ready with the error", msgs)
	}
}

func TestWorkerStopsWithoutGo(t *testing.T) {
	msgs, err := serve(t, []string{`{"peer":"fake","keys":1,"instances":1,"callers":1}`}, func(workerSpec) ([]bench.Limiter, func(), error) {
		return []bench.Limiter{yes{}}, func() {}, nil
	})
	if err == nil || len(msgs) != 1 {
		t.Errorf("stdin ended before go: error %v, %d messages; want an error after ready", err, len(msgs))
	}
}

func TestResultRoundTrip(t *testing.T) {
	var tl tally
	tl.count(true, nil)
	tl.count(false, nil)
	tl.count(true, bench.ErrDegraded)
	tl.count(false, errors.New("boom"))
	tl.hist.Record(time.Millisecond)
	tl.elapsed = time.Second
	data, err := json.Marshal(resultOf(&tl, 0.25))
	if err != nil {
		t.Fatal(err)
	}
	var r workerResult
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	back := r.tally()
	if back.allowed != 1 || back.denied != 1 || back.degraded != 1 || back.admitDeg != 1 || back.errs != 1 ||
		back.firstErr == nil || back.firstErr.Error() != "boom" || back.elapsed != time.Second || back.hist != tl.hist || r.CPU != 0.25 {
		t.Errorf("round trip of %s lost something", data)
	}
}

func TestIdealOnTheCallsMade(t *testing.T) {
	lim := bench.Limit{Rate: 1000, Period: time.Second, Burst: 1000}
	// Two workers' counts, the second begun 2 slots after the first.
	a := &tally{sentIn: []uint32{600, 600, 600}, backIn: []uint32{0, 600, 600, 600}}
	b := &tally{sentIn: []uint32{5, 5}, backIn: []uint32{0, 5, 5}}
	b.sentIn, b.backIn = shiftSlots(b.sentIn, 2), shiftSlots(b.backIn, 2)
	if want := []uint32{0, 0, 5, 5}; !slices.Equal(b.sentIn, want) {
		t.Fatalf("shifted sends = %v, want %v", b.sentIn, want)
	}
	total := new(tally)
	total.add(a)
	total.add(b)
	if want := []uint32{600, 600, 605, 5}; !slices.Equal(total.sentIn, want) {
		t.Fatalf("merged sends = %v, want %v", total.sentIn, want)
	}
	lo, hi, ok := total.idealIn(lim, time.Millisecond)
	// Sends: 600 of the full bucket, then its other 400 and a refill,
	// then one refill each: 1003. The returns, a slot later, the same;
	// but the last 5 calls returned a slot after the last send, and
	// decided then they could take that slot's refill: 1004 at most.
	if !ok || lo != 1003 || hi != 1004 {
		t.Errorf("idealIn = %d, %d, %v; want 1003, 1004, true", lo, hi, ok)
	}
	if _, _, ok := new(tally).idealIn(lim, time.Millisecond); ok {
		t.Error("idealIn of a tally without slots is ok")
	}
}

// TestBusyAndFloorBound checks the CPUs busy row and the floor line under
// a table: medians over rounds, unknown CPU left out, and the floor line
// only when floor and redis_rate were both measured.
func TestBusyAndFloorBound(t *testing.T) {
	round := func(decisions uint64, redisCPU, clientCPU float64) fleetRun {
		tl := &tally{allowed: decisions, elapsed: 2 * time.Second}
		return fleetRun{t: tl, redisCPU: redisCPU, clientCPU: clientCPU}
	}
	s := shape{64, 1}
	h := &harness{fleet: map[fleetKey]*fleetCell{
		{scMany, true, s, "sluice"}:     {runs: []fleetRun{round(120_000, 1.8, 1.9), round(140_000, 1.9, -1), round(100_000, 1.7, 2.0)}},
		{scMany, true, s, "redis_rate"}: {runs: []fleetRun{round(100_000, 1.9, 1.9), round(110_000, 1.9, 1.9), round(120_000, 1.9, 1.9)}},
		{scMany, true, s, "floor"}:      {runs: []fleetRun{round(99_000, 1.5, 1.9), round(150_000, 1.5, 1.9), round(160_000, 1.5, 1.9)}},
	}}
	for _, c := range h.fleet {
		for i := range c.runs {
			c.runs[i].round = i
		}
	}
	sum := h.fleet[fleetKey{scMany, true, s, "sluice"}].summary()
	// Redis: 0.9, 0.95, 0.85 CPUs; client: 0.95, unknown, 1.0.
	if math.Abs(sum.redisBusy-0.9) > 1e-9 || math.Abs(sum.clientBusy-0.975) > 1e-9 {
		t.Errorf("busy = %v / %v, want 0.9 / 0.975", sum.redisBusy, sum.clientBusy)
	}
	peers := []bench.Peer{{Name: "sluice"}, {Name: "redis_rate"}, {Name: "floor", FleetOnly: true}}
	line := h.ratioLine(scMany, true, s, peers)
	// redis_rate's median 55,000/s; sluice's slowest 50,000/s, floor's 49,500/s.
	for _, want := range []string{"slowest round ÷ redis_rate's median 0.91×", "floor's slowest round ÷ redis_rate's median 0.90×"} {
		if !strings.Contains(line, want) {
			t.Errorf("ratio line %q lacks %q", line, want)
		}
	}
	delete(h.fleet, fleetKey{scMany, true, s, "floor"})
	if line := h.ratioLine(scMany, true, s, peers); strings.Contains(line, "floor") {
		t.Errorf("ratio line without floor's cell names floor: %q", line)
	}
}

// pairRun is a run of round r, measured for 1 s, with the given
// decisions/s and CPU µs per decision (negative: CPU unknown).
func pairRun(r int, rate, redisUS, clientUS float64) fleetRun {
	cpu := func(us float64) float64 {
		if us < 0 {
			return -1
		}
		return us * rate / 1e6
	}
	return fleetRun{t: &tally{allowed: uint64(rate), elapsed: time.Second}, redisCPU: cpu(redisUS), redisSys: -1, clientCPU: cpu(clientUS), round: r}
}

// withSys is r with sysUS of its Redis CPU per decision in the kernel.
func withSys(r fleetRun, sysUS float64) fleetRun {
	r.redisSys = sysUS * float64(r.t.decisions()) / 1e6
	return r
}

// near reports whether a and b agree to 1e-9, NaN matching NaN.
func near(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) < 1e-9
}

func TestPair(t *testing.T) {
	nan := math.NaN()
	sluice := []fleetRun{pairRun(0, 1000, 10, 20), pairRun(1, 1100, 9, 20), pairRun(2, 1200, 8, 20)}
	other := []fleetRun{pairRun(0, 1000, 10, 20), pairRun(1, 1000, 10, 20), pairRun(2, 1000, 10, 20)}
	tests := []struct {
		name string
		a, b []fleetRun
		want pairing
	}{
		{"every round", sluice, other,
			pairing{rounds: []int{0, 1, 2}, rate: 1.1, rateMin: 1, rateMax: 1.2, redisUS: 0.9, redisN: 3, redisUserUS: nan, redisSysUS: nan, clientUS: 1, clientN: 3}},
		{"round lost by the other peer, even count", sluice, []fleetRun{other[0], other[2]},
			pairing{rounds: []int{0, 2}, rate: 1.1, rateMin: 1, rateMax: 1.2, redisUS: 0.9, redisN: 2, redisUserUS: nan, redisSysUS: nan, clientUS: 1, clientN: 2}},
		{"round lost by sluice", sluice[1:], other,
			pairing{rounds: []int{1, 2}, rate: 1.15, rateMin: 1.1, rateMax: 1.2, redisUS: 0.85, redisN: 2, redisUserUS: nan, redisSysUS: nan, clientUS: 1, clientN: 2}},
		{"Redis CPU unknown in a round", sluice, []fleetRun{other[0], other[1], pairRun(2, 1000, -1, 20)},
			pairing{rounds: []int{0, 1, 2}, rate: 1.1, rateMin: 1, rateMax: 1.2, redisUS: 0.95, redisN: 2, redisUserUS: nan, redisSysUS: nan, clientUS: 1, clientN: 3}},
		{"no decisions in a round", []fleetRun{sluice[0], pairRun(1, 0, 9, 20), sluice[2]}, other,
			pairing{rounds: []int{0, 2}, rate: 1.1, rateMin: 1, rateMax: 1.2, redisUS: 0.9, redisN: 2, redisUserUS: nan, redisSysUS: nan, clientUS: 1, clientN: 2}},
		{"no round in common", sluice[:1], other[1:],
			pairing{rate: nan, rateMin: nan, rateMax: nan, redisUS: nan, redisUserUS: nan, redisSysUS: nan, clientUS: nan}},
		{"the kernel's part known", []fleetRun{withSys(sluice[0], 6), withSys(sluice[1], 4), withSys(sluice[2], 4)},
			[]fleetRun{withSys(other[0], 4), withSys(other[1], 4), withSys(other[2], 5)},
			pairing{rounds: []int{0, 1, 2}, rate: 1.1, rateMin: 1, rateMax: 1.2, redisUS: 0.9, redisN: 3, redisUserUS: 0.8, redisSysUS: 1, clientUS: 1, clientN: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pair(&fleetCell{runs: tt.a}, &fleetCell{runs: tt.b})
			w := tt.want
			if !slices.Equal(got.rounds, w.rounds) || !near(got.rate, w.rate) || !near(got.rateMin, w.rateMin) || !near(got.rateMax, w.rateMax) ||
				!near(got.redisUS, w.redisUS) || got.redisN != w.redisN || !near(got.clientUS, w.clientUS) || got.clientN != w.clientN ||
				!near(got.redisUserUS, w.redisUserUS) || !near(got.redisSysUS, w.redisSysUS) {
				t.Errorf("pair = %+v, want %+v", got, w)
			}
		})
	}
}

// TestPairedLine checks the paired line under a table: against redis_rate
// and floor, each over its own rounds, with the highest load at the start
// of the rounds used.
func TestPairedLine(t *testing.T) {
	s := shape{32, 2}
	cell := func(runs ...fleetRun) *fleetCell { return &fleetCell{runs: runs} }
	h := &harness{
		fleet: map[fleetKey]*fleetCell{
			{scMany, false, s, "sluice"}:     cell(withSys(pairRun(0, 1100, 9, 20), 4), withSys(pairRun(1, 1200, 8, 20), 4), withSys(pairRun(3, 1300, 8, 20), 4)),
			{scMany, false, s, "redis_rate"}: cell(withSys(pairRun(0, 1000, 10, 20), 4), pairRun(1, 1000, -1, 20), withSys(pairRun(2, 1000, 10, 20), 4)),
			{scMany, false, s, "floor"}:      cell(withSys(pairRun(1, 1500, 5, 10), 2), withSys(pairRun(3, 1300, 5, 10), 2)),
		},
		roundLoad: []float64{0.5, math.NaN(), 9, 2.25},
	}
	line := h.pairedLine(scMany, false, s)
	// redis_rate pairs rounds 0 and 1 (1.1×, 1.2×; Redis CPU known in 0
	// only), floor rounds 1 and 3 (0.8×, 1×); round 2 is not used.
	for _, want := range []string{
		"- 32×2: ",
		"÷ redis_rate over 2 round(s): decisions/s 1.15× (1.10–1.20), Redis CPU/decision 0.90× (1 round(s)) (its own code 0.83×, the kernel 1.00×), client CPU/decision 1.00×",
		"; ÷ floor over 2 round(s): decisions/s 0.90× (0.80–1.00), Redis CPU/decision 1.60× (its own code 1.33×, the kernel 2.00×), client CPU/decision 2.00×",
		"highest load average (1 min) at the start of those rounds 2.25\n",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("pairedLine = %q, lacks %q", line, want)
		}
	}
	h.roundLoad = nil
	if line := h.pairedLine(scMany, false, s); !strings.HasSuffix(line, "rounds n/a\n") {
		t.Errorf("pairedLine without load averages = %q, want n/a for the load", line)
	}
	delete(h.fleet, fleetKey{scMany, false, s, "floor"})
	if line := h.pairedLine(scMany, false, s); strings.Contains(line, "floor") {
		t.Errorf("pairedLine without floor's cell = %q, names floor", line)
	}
	delete(h.fleet, fleetKey{scMany, false, s, "sluice"})
	if line := h.pairedLine(scMany, false, s); line != "" {
		t.Errorf("pairedLine without sluice = %q, want none", line)
	}
}
