package main

import (
	"context"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bench"
)

// redisStats is what INFO says about the server's work so far.
type redisStats struct {
	cpu  float64          // used_cpu_sys + used_cpu_user, seconds
	sys  float64          // used_cpu_sys alone: the kernel's part
	cmds map[string]int64 // calls per command, commands run by scripts included
}

// notCounted are the commands the harness itself sends; they are left out of
// a limiter's cost.
var notCounted = map[string]bool{"info": true, "flushall": true}

func readStats(ctx context.Context, admin *redis.Client) (redisStats, error) {
	s := redisStats{cmds: map[string]int64{}}
	user, sys, err := bench.UsedCPUSplit(ctx, admin)
	if err != nil {
		return s, err
	}
	s.cpu, s.sys = user+sys, sys
	cs, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return s, err
	}
	for _, f := range bench.InfoFields(cs) {
		name, ok := strings.CutPrefix(f[0], "cmdstat_")
		if !ok || notCounted[name] {
			continue
		}
		for _, kv := range strings.Split(f[1], ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				s.cmds[name] = n
			}
		}
	}
	return s, nil
}

// redisCost is the server's work between two snapshots, or the sum of
// several such.
type redisCost struct {
	cpu   float64
	sys   float64 // the kernel's part of cpu
	cmds  int64
	byCmd map[string]int64
}

func costBetween(a, b redisStats) redisCost {
	c := redisCost{cpu: b.cpu - a.cpu, sys: b.sys - a.sys, byCmd: map[string]int64{}}
	for name, n := range b.cmds {
		if d := n - a.cmds[name]; d > 0 {
			c.cmds += d
			c.byCmd[name] = d
		}
	}
	return c
}

func (c *redisCost) add(o redisCost) {
	c.cpu += o.cpu
	c.sys += o.sys
	c.cmds += o.cmds
	if c.byCmd == nil {
		c.byCmd = map[string]int64{}
	}
	for name, n := range o.byCmd {
		c.byCmd[name] += n
	}
}

type cmdCount struct {
	name string
	n    int64
}

// sorted lists the commands, most called first.
func (c *redisCost) sorted() []cmdCount {
	var out []cmdCount
	for name, n := range c.byCmd {
		out = append(out, cmdCount{name, n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].n != out[j].n {
			return out[i].n > out[j].n
		}
		return out[i].name < out[j].name
	})
	return out
}
