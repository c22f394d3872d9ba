package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// startTimeout bounds how long Start and Restart wait for PING, unless
	// ServerOptions.StartTimeout says otherwise.
	startTimeout = 10 * time.Second
	// stopTimeout bounds how long Stop waits before it falls back to
	// SIGKILL, unless ServerOptions.StopTimeout says otherwise.
	stopTimeout = 10 * time.Second
	// pollInterval is the gap between readiness probes.
	pollInterval = 10 * time.Millisecond
	// probeTimeout bounds one readiness probe (dial, write and read).
	probeTimeout = 250 * time.Millisecond
	// startAttempts is how many ports Start tries when a port turns out to be taken.
	startAttempts = 3
	// logTailBytes is how much of the server log goes into failure messages.
	logTailBytes = 2048
)

var (
	errPortInUse = errors.New("port already in use")
	errExited    = errors.New("redis-server exited during startup")
	errNotReady  = errors.New("redis-server did not answer in time")
)

// Server is a private redis-server child process listening on a loopback
// port. It is created by [Start] in a test, or by [Launch] anywhere else;
// the zero value is not usable.
//
// The process has its own temporary directory and saves nothing to disk. A
// server from Start is killed and reaped when the test that started it
// ends; a server from Launch must be closed with [Server.Close].
// [Server.Addr] stays the same across [Server.Kill], [Server.Stop] and
// [Server.Restart].
//
// A Server is safe for concurrent use. Kill, Stop, Restart, Relaunch and
// Close are serialized. Restart reports failure with the Fatal method of the
// testing.TB given to [Start], so like Fatal it must be called from the
// goroutine running the test.
type Server struct {
	tb      testing.TB // nil for a server from Launch
	logf    func(format string, args ...any)
	bin     string
	prefix  []string // command that runs bin, such as taskset -c 0; empty for none
	conf    string   // config file passed first on the command line; "" for none
	extra   []string
	dir     string
	ownDir  bool // dir was made by Launch, and Close removes it
	logPath string
	port    int
	addr    string

	startTimeout time.Duration
	stopTimeout  time.Duration

	opMu   sync.Mutex // serializes Kill, Stop, Relaunch and Close
	closed bool       // Close has run; guarded by opMu

	mu      sync.Mutex // guards proc and command
	proc    *process
	command []string // the command line of the last process
}

// ServerOptions configures a server started by [Launch]. The zero value
// starts redis-server as [Start] does.
type ServerOptions struct {
	// Args are passed to redis-server after the ones Launch sets, as the
	// args of [Start] are; the same rules apply.
	Args []string

	// Prefix is a command that runs redis-server, such as
	// {"taskset", "-c", "0"} or {"valgrind", "--tool=callgrind"}: the
	// process started is Prefix followed by redis-server and its
	// arguments. The prefix must run redis-server in the process it was
	// started as, as taskset, nice and valgrind do, because the server is
	// taken as ready only when it reports that process id. Empty runs
	// redis-server directly.
	Prefix []string

	// StartTimeout bounds the wait for the server to answer, at Launch
	// and at each Relaunch. Zero means 10 seconds; a server under
	// valgrind needs more.
	StartTimeout time.Duration

	// StopTimeout bounds how long Stop and Close wait for the server to
	// exit after SIGTERM before they kill it. Zero means 10 seconds.
	StopTimeout time.Duration
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has returned
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Start starts a private server (redis-server, valkey-server, or the one
// SLUICE_REDIS_SERVER names: see "Which server" in the package doc) on a
// free 127.0.0.1 port and returns it once it answers PING. The server runs in a directory from
// tb.TempDir with persistence off (--save "" --appendonly no), and it is
// killed at tb.Cleanup, also when the test fails.
//
// args are passed to redis-server after the ones Start sets, for example
// Start(tb, "--maxmemory", "1mb"). Redis lets later arguments win, so args
// can override Start's own settings; do not override --port, --bind or
// --daemonize.
//
// When no server binary is found, Start calls tb.Skip, or tb.Fatal when the
// environment variable CI is "true" or "1", or when SLUICE_REDIS_SERVER
// names a binary that is not there. Start calls tb.Fatal if the
// server cannot start within about 10 seconds; a port taken between choosing
// it and binding it is retried with a new port up to three times. The
// failure message includes the end of the server's log.
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	return start(tb, freePort, args)
}

// start is Start with the port picker as a parameter, for tests.
func start(tb testing.TB, pickPort func() (int, error), args []string) *Server {
	tb.Helper()
	args = slices.Clone(args)
	return startWith(tb, pickPort, func(string, int) (string, []string, error) { return "", args, nil })
}

// setupFunc prepares one attempt to start a server on port, with dir as its
// working directory: it may write files there, and returns the config file
// to pass first on the command line ("" for none) and the arguments to pass
// after Start's own. The result is kept for Restart.
type setupFunc func(dir string, port int) (conf string, args []string, err error)

// startWith is Start for any kind of redis-server: a cluster node, a
// sentinel. setup runs before each attempt.
func startWith(tb testing.TB, pickPort func() (int, error), setup setupFunc) *Server {
	tb.Helper()
	s := newServer(lookServer(tb), tb.TempDir(), ServerOptions{})
	s.tb = tb
	s.logf = tb.Logf
	// Registered before the first process starts, so that it also runs when
	// startup fails half way. TempDir's own cleanup was registered earlier
	// and therefore runs later, after the process is gone.
	tb.Cleanup(s.Kill)
	if err := s.boot(pickPort, setup); err != nil {
		tb.Fatalf("%v", err)
	}
	return s
}

// Launch starts a private server, found as [Start] finds it, on a free
// 127.0.0.1 port, and returns it once it answers PING. It is Start for
// code that has no testing.TB, such as benchmark harnesses and example
// programs: it never skips, and it reports failure as an error.
//
// The server runs in a new temporary directory with persistence off. The
// caller must call [Server.Close], which stops the server and removes the
// directory. On Linux the server is also killed if this process dies.
//
// Launch returns an error wrapping [exec.ErrNotFound] when no server binary
// is on PATH (or the error of the path SLUICE_REDIS_SERVER gives), and an
// error that includes the end of the server's log when
// the server cannot start within opts.StartTimeout; a port taken between
// choosing it and binding it is retried with a new port up to three times.
func Launch(opts ServerOptions) (*Server, error) {
	bin, _, err := osBinaries.server()
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s := newServer(bin, dir, opts)
	s.ownDir = true
	args := slices.Clone(opts.Args)
	err = s.boot(freePort, func(string, int) (string, []string, error) { return "", args, nil })
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// newServer returns a Server for bin in dir, not yet started.
func newServer(bin, dir string, opts ServerOptions) *Server {
	s := &Server{
		bin:          bin,
		prefix:       slices.Clone(opts.Prefix),
		dir:          dir,
		logPath:      filepath.Join(dir, "redis-server.log"),
		startTimeout: opts.StartTimeout,
		stopTimeout:  opts.StopTimeout,
	}
	if s.startTimeout <= 0 {
		s.startTimeout = startTimeout
	}
	if s.stopTimeout <= 0 {
		s.stopTimeout = stopTimeout
	}
	return s
}

// boot starts the first process, on a port from pickPort, trying another
// port when one turns out to be taken. setup runs before each attempt.
func (s *Server) boot(pickPort func() (int, error), setup setupFunc) error {
	var err error
	for range startAttempts {
		var port int
		port, err = pickPort()
		if err != nil {
			return fmt.Errorf("redistest: choose a free port: %w", err)
		}
		s.port = port
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.conf, s.extra, err = setup(s.dir, port)
		if err != nil {
			return fmt.Errorf("redistest: prepare redis-server on %s: %w", s.addr, err)
		}
		_, err = s.launch(time.Now().Add(s.startTimeout))
		if err == nil {
			return nil
		}
		if !errors.Is(err, errPortInUse) {
			break
		}
		if s.logf != nil {
			s.logf("redistest: port %d was taken, trying another", port)
		}
	}
	return fmt.Errorf("redistest: start redis-server on %s: %w\n%s", s.addr, err, s.logTail())
}

// inCI reports whether the environment variable CI says we run under CI.
func inCI() bool {
	v := os.Getenv("CI")
	return v == "1" || strings.EqualFold(v, "true")
}

// freePort asks the kernel for a free loopback port. The port is released
// before it is returned, so another process may take it; launch detects that.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, err
	}
	return port, nil
}

// Addr returns the server's address, "127.0.0.1:port". It does not change
// when the server is killed or restarted.
func (s *Server) Addr() string { return s.addr }

// Running reports whether the redis-server process is alive. It is false
// after Kill or Stop and true again after a successful Restart.
func (s *Server) Running() bool {
	p := s.current()
	return p != nil && !p.exited()
}

// Kill sends SIGKILL to the redis-server process and waits until it has
// exited and been reaped. Clients see refused connections until Restart.
// Kill does nothing when the process is not running.
func (s *Server) Kill() {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	p := s.current()
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Kill() // fails only if the process has already exited
	<-p.done
}

// Stop shuts the server down gracefully with SIGTERM, which Redis treats as
// SHUTDOWN (nothing is saved unless args to [Start] turned persistence on),
// and waits until it has exited. If the process has not exited after 10
// seconds (ServerOptions.StopTimeout for a server from [Launch]), Stop
// kills it. Stop does nothing when the process is not running.
func (s *Server) Stop() {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	_ = s.stop()
}

// stop is Stop with s.opMu held. It returns an error if it had to kill the
// process.
func (s *Server) stop() error {
	p := s.current()
	if p == nil || p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(s.stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("redistest: redis-server on %s did not exit within %v of SIGTERM, killed it", s.addr, s.stopTimeout)
	}
}

// Close stops the server as [Server.Stop] does and, for a server from
// [Launch], removes its directory. A closed server cannot be restarted;
// Close again does nothing and returns nil.
//
// A server from Launch must be closed. A server from [Start] need not be:
// the test's cleanup kills it and removes its directory.
//
// Close returns an error if the server did not exit within the stop timeout
// and had to be killed (for a server run under valgrind, a sign that its
// report may be missing), or if its directory could not be removed.
func (s *Server) Close() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.stop()
	if s.ownDir {
		err = errors.Join(err, os.RemoveAll(s.dir))
	}
	return err
}

// Restart starts redis-server again, on the same port and directory and with
// the same arguments, after Kill or Stop, and waits until it answers PING.
// The new server starts empty.
//
// Restart calls Fatal on the testing.TB given to [Start] if the server is
// still running, or if it does not answer within about 10 seconds; it retries
// while the port is briefly unavailable. A server from [Launch] has no
// testing.TB: use [Server.Relaunch] for it, as Restart panics where it would
// call Fatal.
func (s *Server) Restart() {
	if s.tb == nil {
		if err := s.Relaunch(); err != nil {
			panic(err)
		}
		return
	}
	s.tb.Helper()
	if err := s.Relaunch(); err != nil {
		s.tb.Fatalf("%v", err)
	}
}

// Relaunch is [Server.Restart] reporting failure as an error rather than
// through a testing.TB: it starts redis-server again after Kill or Stop,
// on the same port and directory and with the same arguments, and waits
// until it answers PING. It fails if the server is still running or has
// been closed, or if it does not answer within the start timeout.
func (s *Server) Relaunch() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if s.closed {
		return fmt.Errorf("redistest: restart redis-server on %s: the server is closed", s.addr)
	}
	if s.Running() {
		return fmt.Errorf("redistest: Restart(%s): server is still running; call Kill or Stop first", s.addr)
	}
	deadline := time.Now().Add(s.startTimeout)
	for {
		_, err := s.launch(deadline)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errPortInUse) || !waitUntil(deadline, 50*time.Millisecond) {
			return fmt.Errorf("redistest: restart redis-server on %s: %w\n%s", s.addr, err, s.logTail())
		}
	}
}

// waitUntil waits for d, or returns false at once when that would pass the
// deadline.
func waitUntil(deadline time.Time, d time.Duration) bool {
	if time.Until(deadline) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
	return true
}

// Command returns the command line the server was last started with: the
// prefix from [ServerOptions], if any, then the path of redis-server and
// its arguments. The caller may modify the returned slice.
func (s *Server) Command() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.command)
}

func (s *Server) current() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// pid returns the process id of the current or last process, for tests.
func (s *Server) pid() int {
	if p := s.current(); p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// launch starts one redis-server process on s.port and waits until it
// answers or the deadline passes. It returns the log offset where this run's
// output starts. On failure no process is left running.
func (s *Server) launch(deadline time.Time) (int64, error) {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	var offset int64
	if fi, err := logf.Stat(); err == nil {
		offset = fi.Size()
	}
	args := append([]string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "no",
		"--daemonize", "no",
	}, s.extra...)
	if s.conf != "" {
		// redis-server reads a config file only as its first argument.
		args = append([]string{s.conf}, args...)
	}
	argv := append(append(slices.Clone(s.prefix), s.bin), args...)
	fmt.Fprintf(logf, "=== redistest: %s\n", shellJoin(argv))

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.dir
	cmd.Stdout = logf // an *os.File is handed to the child as is: no copying goroutine
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	logf.Close() // the child has its own descriptor
	if err != nil {
		return offset, err
	}
	favour(cmd.Process.Pid)
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	s.mu.Lock()
	s.proc = p
	s.command = argv
	s.mu.Unlock()

	err = s.waitReady(p, deadline)
	if err == nil {
		return offset, nil
	}
	_ = cmd.Process.Kill()
	<-p.done
	if errors.Is(err, errExited) && bytes.Contains(s.logSince(offset), []byte("Address already in use")) {
		return offset, errPortInUse
	}
	return offset, err
}

// shellJoin joins args for the log, quoting those that need it.
func shellJoin(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\") {
			a = strconv.Quote(a)
		}
		quoted[i] = a
	}
	return strings.Join(quoted, " ")
}

// waitReady polls the server until it answers as process p, p exits, or the
// deadline passes.
func (s *Server) waitReady(p *process, deadline time.Time) error {
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		pid, err := probe(s.addr, probeTimeout)
		switch {
		case err == nil && pid == p.cmd.Process.Pid:
			return nil
		case err == nil:
			// Another server owns the port; ours will fail to bind and exit.
			last = fmt.Errorf("a different process (pid %d) answers on %s", pid, s.addr)
		case isReplyError(err) && !strings.HasPrefix(err.Error(), "LOADING") && !p.exited():
			// A server answers but will not say who it is (for example
			// because args set requirepass). Redis accepts connections only
			// once it is ready, and ours is alive, so take it as ready.
			return nil
		default:
			last = err
		}
		select {
		case <-p.done:
			return errExited
		case <-timeout.C:
			return fmt.Errorf("%w after %v (last probe: %v)", errNotReady, s.startTimeout, last)
		case <-tick.C:
		}
	}
}

// replyError is an error reply from Redis, such as "NOAUTH ...".
type replyError string

func (e replyError) Error() string { return string(e) }

func isReplyError(err error) bool {
	var re replyError
	return errors.As(err, &re)
}

// probe sends INFO server over a fresh connection and returns the
// process_id the server reports.
func probe(addr string, timeout time.Duration) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return 0, errors.New("empty reply")
	}
	switch line[0] {
	case '-':
		return 0, replyError(line[1:])
	case '$', '=': // bulk string, or RESP3 verbatim string
	default:
		return 0, fmt.Errorf("unexpected reply %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return 0, fmt.Errorf("unexpected reply %q", line)
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

// logSince returns the server log from offset on.
func (s *Server) logSince(offset int64) []byte {
	b, err := os.ReadFile(s.logPath)
	if err != nil || offset > int64(len(b)) {
		return nil
	}
	return b[offset:]
}

// logTail returns the end of the server log, for failure messages.
func (s *Server) logTail() string { return s.logTailN(logTailBytes) }

// logTailN is logTail with at most about n bytes of the log.
func (s *Server) logTailN(n int) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no redis-server log: %v)", err)
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return "redis-server log (" + s.logPath + "), last lines:\n" + string(b)
}
