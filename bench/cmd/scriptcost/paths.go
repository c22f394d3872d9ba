package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/sluicehq/sluice/core"
)

// The -paths table: what one decision costs Redis for a path of 1 to 4
// levels (core/internal/redisstore/path.lua, one key per level, one limit each, all decided
// in one call) against one key with as many limits (core/internal/redisstore/bucket.lua's
// batch form, one group). Both decide the limit every script here
// decides, at every level or limit, on buckets that exist; the arguments
// are those the library sends, captured as for the lone call.

// pathCall captures the script call of a sluice path decision of depth
// levels.
func pathCall(depth int) (*captured, error) {
	rec := &recorder{reply: []any{int64(1), int64(0), int64(0), int64(0), int64(0), int64(0)}}
	lim, err := core.New(rec, core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), core.WithFallbackReplicas(1))
	if err != nil {
		return nil, err
	}
	names := []string{"org", "team", "user", "key"}
	var levels []core.Level
	path := make([]string, depth)
	for i := range depth {
		levels = append(levels, core.Level{Name: names[i], Limits: []core.Limit{{Rate: limitRate, Period: limitPeriod, Burst: limitBurst}}})
		path[i] = names[i]
	}
	r, err := lim.PreparePath("", levels...)
	if err != nil {
		return nil, err
	}
	_, err = r.Allow(context.Background(), path...)
	if rec.got == nil {
		return nil, fmt.Errorf("sluice made no path script call (%v)", err)
	}
	return rec.got, nil
}

// manyCall captures the script call of a sluice decision of one key under
// n limits (the same limit with n names, so that they are n buckets).
func manyCall(n int) (*captured, error) {
	rec := &recorder{reply: []any{int64(1), int64(0), int64(0), int64(0), int64(0)}}
	lim, err := core.New(rec, core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), core.WithFallbackReplicas(1))
	if err != nil {
		return nil, err
	}
	var limits []core.Limit
	for i := range n {
		limits = append(limits, core.Limit{Rate: limitRate, Period: limitPeriod, Burst: limitBurst, Name: fmt.Sprint(i)})
	}
	_, err = lim.Allow(context.Background(), "k", limits...)
	if rec.got == nil {
		return nil, fmt.Errorf("sluice made no script call (%v)", err)
	}
	return rec.got, nil
}

// runPaths prints the -paths table: per decision, not per key.
func runPaths(calls, nkeys int, useCallgrind bool) error {
	fmt.Println("| levels or limits | a path (path.lua, one key per level) | one key with as many limits (bucket.lua) | path / one key |")
	fmt.Println("| ---: | ---: | ---: | ---: |")
	for depth := 1; depth <= 4; depth++ {
		pc, err := pathCall(depth)
		if err != nil {
			return err
		}
		mc, err := manyCall(depth)
		if err != nil {
			return err
		}
		// nkeys a multiple of depth: each key keeps one level's place.
		n := nkeys - nkeys%depth
		path := variant{name: "path", src: pc.src, args: func(int) []any { return pc.args }}
		many := variant{name: "one key", src: mc.src, args: func(int) []any { return mc.args }}
		var xs [2]float64
		for i, c := range []struct {
			v variant
			k int
		}{{path, depth}, {many, 1}} {
			if useCallgrind {
				x, err := instructions(c.v, c.k, calls, n)
				if err != nil {
					return fmt.Errorf("%s of %d: %w", c.v.name, depth, err)
				}
				xs[i] = x[0] * float64(c.k) // per decision
			} else {
				cpu, _, err := cpuPerKey(c.v, c.k, calls, n)
				if err != nil {
					return fmt.Errorf("%s of %d: %w", c.v.name, depth, err)
				}
				xs[i] = cpu * float64(c.k)
			}
		}
		format := "%.2f"
		if useCallgrind {
			format = "%.0f"
		}
		fmt.Printf("| %d | "+format+" | "+format+" | %.2f |\n", depth, xs[0], xs[1], xs[0]/xs[1])
	}
	unit := "Redis CPU µs per decision (INFO cpu)"
	flags := " -paths"
	if useCallgrind {
		unit, flags = "instructions per decision (callgrind)", " -paths -callgrind"
	}
	fmt.Printf("\n%s; %d calls per cell; go run ./cmd/scriptcost%s\n", unit, calls, strings.TrimRight(flags, " "))
	return nil
}
