//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// pinnedEnv carries the CPU plan into the re-executed process:
// "redis=<cpus>;go=<cpus>".
const pinnedEnv = "SLUICE_BENCH_PINNED"

// pinning describes how Redis and this process were placed on CPUs.
type pinning struct {
	RedisCPUs string // "" when Redis is not pinned
	GoCPUs    string // "" when this process is not pinned
	Note      string // how, or why not
}

// cpuList formats CPU numbers as taskset accepts them ("1", "1-3", "1,3").
func cpuList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// allowedCPUs returns the CPUs this process may run on.
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		n := runtime.NumCPU()
		cpus := make([]int, n)
		for i := range cpus {
			cpus[i] = i
		}
		return cpus
	}
	var cpus []int
	for i := 0; i < 1024; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus
}

// pin gives Redis the first allowed CPU and this process the others, by
// re-executing this program under `taskset -c <others>` (the Go runtime then
// sizes GOMAXPROCS to them). LockOSThread would not do: it pins a goroutine
// to a thread, not the process's threads to a CPU. It returns only in the
// pinned process, or when pinning is off or impossible.
func pin(enabled bool) pinning {
	if v, ok := os.LookupEnv(pinnedEnv); ok {
		p := pinning{Note: "this process re-executed itself under taskset"}
		for _, kv := range strings.Split(v, ";") {
			k, val, _ := strings.Cut(kv, "=")
			switch k {
			case "redis":
				p.RedisCPUs = val
			case "go":
				p.GoCPUs = val
			}
		}
		return p
	}
	if !enabled {
		return pinning{Note: "pinning off (-pin=false)"}
	}
	cpus := allowedCPUs()
	if len(cpus) < 2 {
		return pinning{Note: fmt.Sprintf("not pinned: only %d CPU available", len(cpus))}
	}
	ts, err := exec.LookPath("taskset")
	if err != nil {
		return pinning{Note: "not pinned: taskset is not on PATH"}
	}
	exe, err := os.Executable()
	if err != nil {
		return pinning{Note: "not pinned: " + err.Error()}
	}
	redisCPUs, goCPUs := cpuList(cpus[:1]), cpuList(cpus[1:])
	env := append(os.Environ(), fmt.Sprintf("%s=redis=%s;go=%s", pinnedEnv, redisCPUs, goCPUs))
	args := append([]string{"taskset", "-c", goCPUs, exe}, os.Args[1:]...)
	err = syscall.Exec(ts, args, env)
	// Exec returns only on failure.
	return pinning{Note: "not pinned: re-exec under taskset failed: " + err.Error()}
}

// affinity lists the CPUs this process may run on, as taskset would.
func affinity() string { return cpuList(allowedCPUs()) }
