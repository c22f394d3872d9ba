package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// report writes markdown to w and remembers the first write error.
type report struct {
	w   *bufio.Writer
	err error
}

func newReport(w io.Writer) *report { return &report{w: bufio.NewWriter(w)} }

func (r *report) printf(format string, args ...any) {
	if r.err != nil {
		return
	}
	if _, err := fmt.Fprintf(r.w, format, args...); err != nil {
		r.err = err
		return
	}
	r.err = r.w.Flush()
}

func (r *report) section(title string)    { r.printf("## %s\n\n", title) }
func (r *report) subsection(title string) { r.printf("### %s\n\n", title) }

// table writes a markdown table; columns after the first are right-aligned.
func (r *report) table(head []string, rows [][]string) {
	var b strings.Builder
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|")
	for i := range head {
		if i == 0 {
			b.WriteString(" --- |")
		} else {
			b.WriteString(" ---: |")
		}
	}
	b.WriteString("\n")
	for _, row := range rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	b.WriteString("\n")
	r.printf("%s", b.String())
}

func perSec(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// grouped formats v rounded to an integer, with thousands separators.
func grouped(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// micros formats d in microseconds with two or three significant digits.
func micros(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	switch {
	case us < 1:
		return strconv.FormatFloat(us, 'f', 2, 64)
	case us < 10:
		return strconv.FormatFloat(us, 'f', 1, 64)
	default:
		return grouped(us)
	}
}

func latencies(h *bench.Histogram) string {
	return micros(h.Quantile(0.5)) + " / " + micros(h.Quantile(0.99)) + " / " + micros(h.Quantile(0.999))
}

// health marks a tally whose calls did not all get a decision from the store.
func (t *tally) health() string {
	calls := t.calls()
	if calls == 0 {
		return " (no calls)"
	}
	var marks []string
	if t.degraded > 0 {
		marks = append(marks, fmt.Sprintf("%s without Redis", pct(t.degraded, calls)))
	}
	if t.errs > 0 {
		marks = append(marks, fmt.Sprintf("%s failed", pct(t.errs, calls)))
	}
	if len(marks) == 0 {
		return ""
	}
	return " (" + strings.Join(marks, ", ") + ")"
}

func pct(n, of uint64) string {
	p := 100 * float64(n) / float64(of)
	if p < 0.1 {
		return "<0.1%"
	}
	return strconv.FormatFloat(p, 'f', 1, 64) + "%"
}

// header describes the run: machine, versions, placement and settings.
func (h *harness) header(out *report) {
	out.printf("# Rate limiter comparison\n\n")
	out.printf("Run %s with `go run ./cmd/compare%s` (from bench/).\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), argsString())
	rows := [][]string{
		{"CPU", fmt.Sprintf("%s, %d CPUs (/proc/cpuinfo)", cpuModel(), cpuCount())},
		{"Go", fmt.Sprintf("%s %s/%s, GOMAXPROCS %d", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))},
		{"Redis", h.redisDescription()},
		{"placement", h.placement()},
	}
	if h.cfg.sections["throughput"] || h.cfg.sections["deny"] {
		rows = append(rows, []string{"cells", fmt.Sprintf("%s measured per cell, in %d round(s) each after %s of warm-up; callers %s; Redis cost at %d callers",
			h.cfg.duration, h.cfg.rounds, h.cfg.warmup, joinInts(h.cfg.callers), h.cfg.costCallers)})
	}
	if h.cfg.sections["throughput"] || h.cfg.sections["deny"] || h.cfg.sections["accuracy"] {
		rows = append(rows, []string{"clients", fmt.Sprintf("each go-redis based limiter has its own client: pool %d, MaxRetries -1, ContextTimeoutEnabled, go-redis's default 5 s timeouts; go-zero uses its own client (see README)", h.env.PoolSize)})
	}
	if h.cfg.sections["fleet"] {
		rows = append(rows, h.fleetHeader())
	}
	rows = append(rows, []string{"load average at start", loadAvg()})
	out.table([]string{"", ""}, rows)
	var mods [][]string
	single := h.cfg.sections["throughput"] || h.cfg.sections["deny"] || h.cfg.sections["accuracy"]
	for _, p := range h.peers {
		if (single && !p.FleetOnly) || (h.cfg.sections["fleet"] && p.Fleet) {
			mods = append(mods, []string{p.Name, moduleVersion(p.Module)})
		}
	}
	out.table([]string{"limiter", "module"}, mods)
}

func (h *harness) redisDescription() string {
	ver := "?"
	if info, err := h.admin.Info(context.Background(), "server").Result(); err == nil {
		for _, f := range bench.InfoFields(info) {
			if f[0] == "redis_version" {
				ver = f[1]
			}
		}
	}
	if !h.own {
		return fmt.Sprintf("redis-server %s at %s (given by -addr; not flushed; its INFO counts every client)", ver, h.env.Addr)
	}
	return fmt.Sprintf("redis-server %s, started by the harness: `%s`", ver, strings.Join(displayCmd(h.redisCmd), " "))
}

// displayCmd shortens the temporary paths of the Redis command line.
func displayCmd(args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		switch {
		case i > 0 && (args[i-1] == "--dir" || args[i-1] == "--logfile"):
			out = append(out, "<tmp>")
		case a == "":
			out = append(out, `""`)
		case strings.Contains(a, "/"):
			out = append(out, a[strings.LastIndex(a, "/")+1:])
		default:
			out = append(out, a)
		}
	}
	return out
}

func (h *harness) placement() string {
	s := h.pinned.Note
	if h.pinned.RedisCPUs != "" && h.own {
		s += fmt.Sprintf("; redis-server on CPU %s", h.pinned.RedisCPUs)
	}
	if h.pinned.GoCPUs != "" {
		s += fmt.Sprintf("; this process on CPU %s", h.pinned.GoCPUs)
	}
	return s
}

func argsString() string {
	var b strings.Builder
	for _, a := range os.Args[1:] {
		b.WriteString(" " + a)
	}
	return b.String()
}

func joinInts(ns []int) string {
	var s []string
	for _, n := range ns {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, ", ")
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, f := range bench.InfoFields(string(data)) {
		if strings.TrimSpace(f[0]) == "model name" {
			return strings.TrimSpace(f[1])
		}
	}
	return "unknown CPU"
}

func cpuCount() int {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, f := range bench.InfoFields(string(data)) {
		if strings.TrimSpace(f[0]) == "processor" {
			n++
		}
	}
	return n
}

// moduleVersion reports the version of module path built into this binary.
func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return path
	}
	for _, m := range bi.Deps {
		if m.Path != path {
			continue
		}
		if m.Replace != nil && m.Replace.Version == "" {
			return path + " (working tree, " + m.Replace.Path + ")"
		}
		return path + " " + m.Version
	}
	return path
}

// notes lists how limits were mapped onto each library, and which could not
// be expressed.
func (h *harness) notes(out *report) {
	if len(h.mapNotes) == 0 && len(h.naNotes) == 0 {
		return
	}
	out.section("Notes")
	for _, k := range sortedKeys(h.mapNotes) {
		out.printf("- %s: %s.\n", k, h.mapNotes[k])
	}
	for _, k := range sortedKeys(h.naNotes) {
		out.printf("- %s: n/a, %s.\n", k, h.naNotes[k])
	}
	out.printf("\n")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// loadAvg returns the 1, 5 and 15 minute load averages, to show how busy the
// machine was besides this run.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ") + " (1, 5, 15 min)"
}

// loadAvg1 returns the 1-minute load average; NaN where /proc/loadavg
// cannot be read (not Linux).
func loadAvg1() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	f := strings.Fields(string(data))
	if len(f) < 1 {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}
