package redistest

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// Stall stops and continues the calling process (the test binary) at
// random until the test ends, as CPU throttling, a descheduled pod or a
// stop-the-world pause do in production: it is stopped (SIGSTOP) for 60 to
// 150 ms every 300 to 800 ms, by a helper process (bash) that continues it
// each time. Redis processes the test started keep running. When tb's
// test ends the helper is told to stop, continues the process and exits
// (within a second).
//
// Use it to check that a limiter does not blame its own pauses on Redis.
// Stall fails the test if bash cannot be started.
func Stall(tb testing.TB) {
	tb.Helper()
	const script = `pid=$1; trap 'kill -CONT "$pid"; exit 0' TERM
while kill -0 "$pid" 2>/dev/null; do
  sleep 0.$(( RANDOM % 500 + 300 ))
  kill -STOP "$pid"; sleep 0.$(printf '%03d' $(( RANDOM % 90 + 60 ))); kill -CONT "$pid"
done`
	cmd := exec.Command("bash", "-c", script, "redistest-stall", strconv.Itoa(os.Getpid()))
	if err := cmd.Start(); err != nil {
		tb.Fatalf("redistest: starting the staller: %v", err)
	}
	tb.Cleanup(func() {
		// SIGTERM, not SIGKILL: bash runs the trap between two commands,
		// so it never leaves this process stopped.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
}
