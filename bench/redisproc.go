package bench

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RedisServer is a private redis-server child process on a loopback port,
// saving nothing to disk. Stop it with Stop.
type RedisServer struct {
	Addr    string
	Command []string // the command line it was started with
	cmd     *exec.Cmd
	dir     string
	done    chan struct{}
}

// StartRedis starts redis-server from PATH on a free loopback port. If cpu
// is not empty and taskset is on PATH, the server is pinned to that CPU list
// (taskset -c cpu). The child is killed if this process dies (Linux).
func StartRedis(cpu string) (*RedisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not on PATH (or pass -addr): %w", err)
	}
	var lastErr error
	for range 3 {
		s, err := startRedisOnce(bin, cpu)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startRedisOnce(bin, cpu string) (*RedisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-bench-redis-")
	if err != nil {
		return nil, err
	}
	args := []string{bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"),
		"--daemonize", "no",
	}
	if cpu != "" {
		if ts, err := exec.LookPath("taskset"); err == nil {
			args = append([]string{ts, "-c", cpu}, args...)
		}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &RedisServer{
		Addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Command: args,
		cmd:     cmd,
		dir:     dir,
		done:    make(chan struct{}),
	}
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server exited at start: %s", lastLines(string(log), 5))
		default:
		}
		if ping(s.Addr) == nil {
			return s, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	return nil, errors.New("redis-server did not answer PING within 10s")
}

// ping sends one inline PING and checks for +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(250 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Stop kills the server, waits for it and removes its directory. It is safe
// to call more than once.
func (s *RedisServer) Stop() {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Kill()
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
		}
	}
	os.RemoveAll(s.dir)
}
