package main

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The cold mode (-cold): callgrind simulates the caches (a level-one cache
// of 32 KiB for instructions and one for data, and a last level of 1 MiB,
// this machine's L2 per core), and the child writes over -cold bytes before
// each measured decision, so that every decision starts with nothing of
// its own in them: the case of a worker process that the scheduler has
// just switched back to after others ran on its core. What a decision then
// misses in the last level is how many distinct cache lines of code and
// data it touches, its footprint, which an instruction count does not see.
// The writing itself (main.evict) is left out of every figure.

// coldSims are callgrind's options for the cold mode.
var coldSims = []string{"--dump-instr=yes", "--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", "--LL=1048576,16,64"}

// costs is a callgrind dump's events summed by function.
type costs struct {
	events []string
	byFn   map[string][]int64
}

// event returns the sum of the named events of fn, or of every function
// when fn is "".
func (c costs) event(fn string, names ...string) int64 {
	sum := func(v []int64) int64 {
		var n int64
		for i, e := range c.events {
			if i < len(v) && slices.Contains(names, e) {
				n += v[i]
			}
		}
		return n
	}
	if fn != "" {
		return sum(c.byFn[fn])
	}
	var n int64
	for _, v := range c.byFn {
		n += sum(v)
	}
	return n
}

// readCosts reads a callgrind dump written with --dump-instr=yes and sums
// each instruction's events into the function of bin that holds it, by
// bin's symbol table (instructions of other objects, and those no symbol
// holds, are summed under "?").
func readCosts(dump, bin string) (costs, error) {
	syms, err := symbols(bin)
	if err != nil {
		return costs{}, err
	}
	f, err := os.Open(dump)
	if err != nil {
		return costs{}, err
	}
	defer f.Close()
	return parseCosts(f, bin, syms)
}

// symbol is a function's address range in a binary.
type symbol struct {
	start, end uint64
	name       string
}

// symbols returns bin's functions, by address.
func symbols(bin string) ([]symbol, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	all, err := f.Symbols()
	if err != nil {
		return nil, err
	}
	var out []symbol
	for _, s := range all {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 {
			out = append(out, symbol{s.Value, s.Value + s.Size, s.Name})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out, nil
}

// lookup returns the name of the function holding addr, or "?".
func lookup(syms []symbol, addr uint64) string {
	i := sort.Search(len(syms), func(i int) bool { return syms[i].start > addr }) - 1
	if i >= 0 && addr < syms[i].end {
		return syms[i].name
	}
	return "?"
}

// parseCosts is readCosts on a dump's text. The format (valgrind's
// callgrind format): "positions: instr line" makes every cost line begin
// with an instruction address and a line number, each absolute (0x1f, 31),
// relative to the previous one (+4, -2) or the same (*), then the counts of
// the "events:" line in order, trailing zeros left out; "ob=(n) name" names
// the object that follows, "ob=(n)" names it again ("ob=name" without
// compression); the cost line after a
// "calls=" line is a call's inclusive cost, already counted where its
// instructions ran, so only its position is taken.
func parseCosts(r io.Reader, bin string, syms []symbol) (costs, error) {
	c := costs{byFn: map[string][]int64{}}
	objects := map[string]string{}
	inBin, call := false, false
	var addr uint64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "events:"):
			c.events = strings.Fields(strings.TrimPrefix(line, "events:"))
			continue
		case strings.HasPrefix(line, "positions:") && strings.TrimSpace(strings.TrimPrefix(line, "positions:")) != "instr line":
			return costs{}, fmt.Errorf("positions %q: want \"instr line\" (--dump-instr=yes)", line)
		case strings.HasPrefix(line, "ob="):
			v := strings.TrimPrefix(line, "ob=")
			id, name, _ := strings.Cut(v, " ")
			if !strings.HasPrefix(v, "(") { // --compress-strings=no
				id, name = v, v
			}
			if name != "" {
				objects[id] = name
			}
			inBin = objects[id] == bin
			continue
		case strings.HasPrefix(line, "calls="):
			call = true
			continue
		}
		if ch := line[0]; !(ch >= '0' && ch <= '9' || ch == '+' || ch == '-' || ch == '*') {
			continue // fn=, fl=, cob= and the like: the address says where
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			return costs{}, fmt.Errorf("cost line %q: no positions", line)
		}
		next, err := position(fields[0], addr)
		if err != nil {
			return costs{}, fmt.Errorf("cost line %q: %v", line, err)
		}
		addr = next
		if call {
			call = false
			continue
		}
		fn := "?"
		if inBin {
			fn = lookup(syms, addr)
		}
		sum := c.byFn[fn]
		if sum == nil {
			sum = make([]int64, len(c.events))
			c.byFn[fn] = sum
		}
		for i, f := range fields[2:] {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil || i >= len(sum) {
				return costs{}, fmt.Errorf("cost line %q: bad or extra count %q", line, f)
			}
			sum[i] += n
		}
	}
	if err := sc.Err(); err != nil {
		return costs{}, err
	}
	if len(c.events) == 0 {
		return costs{}, fmt.Errorf("no events line")
	}
	return c, nil
}

// position reads a compressed position after prev.
func position(f string, prev uint64) (uint64, error) {
	switch {
	case f == "*":
		return prev, nil
	case f[0] == '+':
		n, err := strconv.ParseUint(f[1:], 0, 64)
		return prev + n, err
	case f[0] == '-':
		n, err := strconv.ParseUint(f[1:], 0, 64)
		return prev - n, err
	}
	return strconv.ParseUint(f, 0, 64)
}

// coldGroups are the groups a cold decision's code is split into, in the
// order printed: the first whose prefix a function's name has.
var coldGroups = []struct{ name, prefix string }{
	{"harness", "main."},
	{"harness", "github.com/sluicehq/sluice/bench."},
	{"sluice", "github.com/sluicehq/sluice/"},
	{"redis_rate", "github.com/go-redis/redis_rate/"},
	{"go-redis", "github.com/redis/go-redis/"},
	{"runtime", "runtime."},
	{"runtime", "internal/runtime/"},
	{"net and syscalls", "net."},
	{"net and syscalls", "internal/poll."},
	{"net and syscalls", "syscall."},
	{"net and syscalls", "internal/syscall/"},
}

// groupOf returns the group of function fn.
func groupOf(fn string) string {
	for _, g := range coldGroups {
		if strings.HasPrefix(fn, g.prefix) {
			return g.name
		}
	}
	return "the rest"
}

// coldReport is the cold mode's line for one limiter: the misses per
// decision in all, less the eviction's, and the instruction lines missed
// in the last level by group of code.
func coldReport(c costs, calls int) string {
	per := func(fn string, names ...string) float64 {
		all := c.event(fn, names...)
		return float64(all) / float64(calls)
	}
	less := func(names ...string) float64 { return per("", names...) - per("main.evict", names...) }
	line := fmt.Sprintf("instructions %.0f, last-level misses: instruction lines %.0f, data lines %.0f (level one: %.0f and %.0f)",
		less("Ir"), less("ILmr"), less("DLmr", "DLmw"), less("I1mr"), less("D1mr", "D1mw"))
	groups := map[string]float64{}
	for fn := range c.byFn {
		if fn != "main.evict" {
			groups[groupOf(fn)] += per(fn, "ILmr")
		}
	}
	var parts []string
	seen := map[string]bool{}
	for _, g := range append(coldGroups, struct{ name, prefix string }{"the rest", ""}) {
		if !seen[g.name] && groups[g.name] >= 0.5 {
			parts = append(parts, fmt.Sprintf("%s %.0f", g.name, groups[g.name]))
		}
		seen[g.name] = true
	}
	return line + "; instruction lines by code: " + strings.Join(parts, ", ") + topOwn(c, calls, per)
}

// coldTop is -cold-top: how many of the limiter's own functions to list
// with the instruction lines each cold decision misses in them.
var coldTop *int

// topOwn lists, after the line, the limiter's own functions (sluice's or
// redis_rate's groups) that miss the most instruction lines per cold
// decision, with the instructions they run; "" when -cold-top is 0.
func topOwn(c costs, calls int, per func(fn string, names ...string) float64) string {
	if coldTop == nil || *coldTop <= 0 {
		return ""
	}
	var own []string
	for fn := range c.byFn {
		if g := groupOf(fn); g == "sluice" || g == "redis_rate" {
			own = append(own, fn)
		}
	}
	sort.Slice(own, func(i, j int) bool { return per(own[i], "ILmr") > per(own[j], "ILmr") })
	var b strings.Builder
	for _, fn := range own[:min(len(own), *coldTop)] {
		fmt.Fprintf(&b, "\n  - %s: %.1f lines, %.0f instructions", fn, per(fn, "ILmr"), per(fn, "Ir"))
	}
	return b.String()
}
