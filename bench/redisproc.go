package bench

import (
	"os/exec"

	"github.com/sluicehq/sluice/redistest"
)

// StartRedis starts a private redis-server from PATH on a free loopback
// port, saving nothing to disk (redistest.Launch). If cpu is not empty and
// taskset is on PATH, the server is pinned to that CPU list (taskset -c
// cpu). The caller must Close it; the child is also killed if this process
// dies (Linux).
func StartRedis(cpu string) (*redistest.Server, error) {
	var opts redistest.ServerOptions
	if cpu != "" {
		if ts, err := exec.LookPath("taskset"); err == nil {
			opts.Prefix = []string{ts, "-c", cpu}
		}
	}
	return redistest.Launch(opts)
}
