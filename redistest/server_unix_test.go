//go:build unix

package redistest

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestCleanupReapsProcess(t *testing.T) {
	var pid int
	t.Run("inner", func(t *testing.T) {
		s := Start(t)
		pid = s.pid()
	})
	if pid == 0 {
		t.Skip("inner test did not start a server")
	}
	// After the subtest's cleanup the process must be gone and reaped: a
	// zombie would still accept signal 0.
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("kill(%d, 0) after cleanup = %v, want ESRCH", pid, err)
	}
}

func TestLaunch(t *testing.T) {
	bin := lookServer(t) // skip or fail like Start: Launch itself never skips
	env, err := exec.LookPath("env")
	if err != nil {
		t.Skip("env is not on PATH")
	}
	ctx := t.Context()
	// env runs redis-server in its own process, as a prefix must.
	s, err := Launch(ServerOptions{Args: []string{"--maxmemory", "1mb"}, Prefix: []string{env}})
	if err != nil {
		t.Fatalf("Launch() = %v", err)
	}
	defer s.Close()
	c := NewClient(t, s.Addr())
	mustPing(t, ctx, c)
	if got, err := c.ConfigGet(ctx, "maxmemory").Result(); err != nil || got["maxmemory"] != "1048576" {
		t.Errorf("ConfigGet(maxmemory) = %v, %v, want 1048576", got, err)
	}
	cmd := s.Command()
	if len(cmd) < 2 || cmd[0] != env || cmd[1] != bin || !slices.Contains(cmd, "--maxmemory") {
		t.Errorf("Command() = %q, want env, %s and its arguments", cmd, bin)
	}

	s.Kill()
	if err := s.Relaunch(); err != nil {
		t.Fatalf("Relaunch() after Kill = %v", err)
	}
	mustPing(t, ctx, c)
	if err := s.Relaunch(); err == nil {
		t.Error("Relaunch() of a running server = nil, want an error")
	}

	pid := s.pid()
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) after Close = %v, want ESRCH", pid, err)
	}
	if _, err := os.Stat(s.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(%s) after Close = %v, want the directory removed", s.dir, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	if err := s.Relaunch(); err == nil {
		t.Error("Relaunch() after Close = nil, want an error")
	}
}

func TestLaunchFailure(t *testing.T) {
	lookServer(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	s, err := Launch(ServerOptions{Args: []string{"--no-such-option", "1"}})
	if err == nil {
		s.Close()
		t.Fatal("Launch(--no-such-option) = nil error")
	}
	for _, want := range []string{"redis-server exited during startup", "no-such-option"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Launch error = %q, want it to contain %q", err, want)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("Launch left %v in TMPDIR", left)
	}
}

func TestLaunchMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CI", "true") // Launch reports an error whether or not under CI
	t.Setenv(envServer, "")
	s, err := Launch(ServerOptions{})
	if err == nil {
		s.Close()
		t.Fatal("Launch() without redis-server on PATH = nil error")
	}
	if !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("Launch() = %v, want an error wrapping exec.ErrNotFound", err)
	}
}
