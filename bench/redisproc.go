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
	var prefix []string
	if cpu != "" {
		if ts, err := exec.LookPath("taskset"); err == nil {
			prefix = []string{ts, "-c", cpu}
		}
	}
	return StartRedisUnder(prefix...)
}

// StartRedisUnder is StartRedis with redis-server run by the command
// prefix, such as "valgrind --tool=callgrind"; none runs it directly.
func StartRedisUnder(prefix ...string) (*RedisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not on PATH (or pass -addr): %w", err)
	}
	var lastErr error
	for range 3 {
		s, err := startRedisOnce(bin, prefix)
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

func startRedisOnce(bin string, prefix []string) (*RedisServer, error) {
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
	args = append(append([]string(nil), prefix...), args...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = ChildAttr()
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
	deadline := time.Now().Add(30 * time.Second) // slow under valgrind
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
	return nil, errors.New("redis-server did not answer PING within 30s")
}

// ping sends one inline PING and checks for +PONG.
func ping(addr string) error {
	c, err := inline(addr, "PING")
	if err != nil {
		return err
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// inline connects to addr and sends command as an inline command, with a
// short deadline for its reply.
func inline(addr, command string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(250 * time.Millisecond))
	if _, err := c.Write([]byte(command + "\r\n")); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Shutdown asks the server to exit (SHUTDOWN NOSAVE) and waits up to
// timeout for it to do so, so that a wrapper such as valgrind can write
// its report; then it cleans up as Stop does.
func (s *RedisServer) Shutdown(timeout time.Duration) error {
	defer s.Stop()
	c, err := inline(s.Addr, "SHUTDOWN NOSAVE")
	if err != nil {
		return err
	}
	c.Close()
	select {
	case <-s.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("redis-server did not exit within %s of SHUTDOWN", timeout)
	}
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
