package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// mustPing fails the test unless PING through c succeeds.
func mustPing(t *testing.T, ctx context.Context, c *redis.Client) {
	t.Helper()
	if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("Ping() = %q, %v, want PONG, nil", got, err)
	}
}

func TestServerKillRestart(t *testing.T) {
	ctx := t.Context()
	s := Start(t)
	addr := s.Addr()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("Addr() = %q, want 127.0.0.1:port", addr)
	}
	c := NewClient(t, addr)
	mustPing(t, ctx, c)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("Set(k, v) = %v, want nil", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("Get(k) = %q, %v, want v, nil", got, err)
	}

	s.Kill()
	if s.Running() {
		t.Fatal("Running() after Kill = true, want false")
	}
	err := c.Ping(ctx).Err()
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Ping() after Kill = %v, want connection refused", err)
	}
	s.Kill() // a second Kill is a no-op

	s.Restart()
	if !s.Running() {
		t.Fatal("Running() after Restart = false, want true")
	}
	if got := s.Addr(); got != addr {
		t.Fatalf("Addr() after Restart = %q, want %q", got, addr)
	}
	mustPing(t, ctx, c)
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("Get(k) after Restart = %v, want redis.Nil (fresh server)", err)
	}
}

func TestServerStopRestart(t *testing.T) {
	ctx := t.Context()
	s := Start(t)
	c := NewClient(t, s.Addr())
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("Set(k, v) = %v, want nil", err)
	}

	s.Stop()
	if s.Running() {
		t.Fatal("Running() after Stop = true, want false")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("Ping() after Stop = nil, want an error")
	}

	s.Restart()
	mustPing(t, ctx, c)
	// A graceful shutdown saves an RDB file when persistence is on; it is
	// off, so the restarted server must be empty.
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("Get(k) after Stop and Restart = %v, want redis.Nil (no persistence)", err)
	}
}

func TestStartPassesArgs(t *testing.T) {
	ctx := t.Context()
	s := Start(t, "--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
	c := NewClient(t, s.Addr())
	tests := []struct {
		name string
		want string
	}{
		{"maxmemory", "1048576"},
		{"maxmemory-policy", "noeviction"},
		{"save", ""},
		{"appendonly", "no"},
		{"bind", "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.ConfigGet(ctx, tt.name).Result()
			if err != nil {
				t.Fatalf("ConfigGet(%s) = %v", tt.name, err)
			}
			if got[tt.name] != tt.want {
				t.Fatalf("ConfigGet(%s) = %q, want %q", tt.name, got[tt.name], tt.want)
			}
		})
	}
}

func TestStartRetriesTakenPort(t *testing.T) {
	lookServer(t) // skip or fail like Start does before occupying a port
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port

	picks := 0
	pick := func() (int, error) {
		picks++
		if picks == 1 {
			return takenPort, nil
		}
		return freePort()
	}
	s := start(t, pick, nil)
	if picks != 2 {
		t.Errorf("start picked %d ports, want 2", picks)
	}
	if s.Addr() == taken.Addr().String() {
		t.Errorf("Addr() = %s, the taken port", s.Addr())
	}
	mustPing(t, t.Context(), NewClient(t, s.Addr()))
}

func TestStartFailureIncludesLog(t *testing.T) {
	lookServer(t)
	ft := &fakeTB{TB: t}
	runFake(func() { Start(ft, "--no-such-option", "1") })
	if !ft.failed {
		t.Fatalf("Start(--no-such-option) did not fail")
	}
	for _, want := range []string{"redis-server exited during startup", "no-such-option"} {
		if !strings.Contains(ft.msg, want) {
			t.Errorf("failure message = %q, want it to contain %q", ft.msg, want)
		}
	}
	ft.runCleanups()
}

func TestMissingServerBinary(t *testing.T) {
	tests := []struct {
		ci       string
		wantFail bool
	}{
		{"", false},
		{"false", false},
		{"true", true},
		{"TRUE", true},
		{"1", true},
	}
	for _, tt := range tests {
		t.Run("CI="+tt.ci, func(t *testing.T) {
			t.Setenv("PATH", t.TempDir())
			t.Setenv("CI", tt.ci)
			t.Setenv(envServer, "")
			ft := &fakeTB{TB: t}
			runFake(func() { Start(ft) })
			defer ft.runCleanups()
			switch {
			case tt.wantFail && !ft.failed:
				t.Fatalf("Start() with CI=%q: failed = false, skipped = %v, want a failure", tt.ci, ft.skipped)
			case !tt.wantFail && !ft.skipped:
				t.Fatalf("Start() with CI=%q: skipped = false, failed = %v, want a skip", tt.ci, ft.failed)
			}
			const want = "redistest: redis-server or valkey-server not found on PATH (executable file not found in $PATH); CI requires a real Redis"
			if tt.wantFail && ft.msg != want {
				t.Errorf("failure message = %q, want %q", ft.msg, want)
			}
			if !strings.Contains(ft.msg, "redis-server or valkey-server not found on PATH") {
				t.Errorf("message = %q, want it to name the missing binary", ft.msg)
			}
		})
	}
}

func TestAddr(t *testing.T) {
	t.Run("REDIS_ADDR set", func(t *testing.T) {
		// Nothing listens on port 1; Addr must not touch the address at all.
		t.Setenv("REDIS_ADDR", "127.0.0.1:1")
		if got := Addr(t); got != "127.0.0.1:1" {
			t.Fatalf("Addr() = %q, want REDIS_ADDR 127.0.0.1:1", got)
		}
	})
	t.Run("REDIS_ADDR unset", func(t *testing.T) {
		t.Setenv("REDIS_ADDR", "")
		addr := Addr(t)
		mustPing(t, t.Context(), NewClient(t, addr))
	})
}

func TestCommandCalls(t *testing.T) {
	ctx := t.Context()
	c := NewClient(t, Start(t).Addr())
	before, err := CommandCalls(ctx, c)
	if err != nil {
		t.Fatalf("CommandCalls() = %v", err)
	}
	if err := c.Get(ctx, "missing").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("Get(missing) = %v, want redis.Nil", err)
	}
	after, err := CommandCalls(ctx, c)
	if err != nil {
		t.Fatalf("CommandCalls() = %v", err)
	}
	if got := after["get"] - before["get"]; got != 1 {
		t.Errorf("get calls grew by %d, want 1", got)
	}
	if got := after["info"] - before["info"]; got != 1 {
		t.Errorf("info calls grew by %d, want 1 (the first CommandCalls)", got)
	}
}

func TestParseCommandStats(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]int64
		wantErr bool
	}{
		{
			name: "redis 7",
			in: "# Commandstats\r\n" +
				"cmdstat_get:calls=3,usec=5,usec_per_call=1.67,rejected_calls=0,failed_calls=0\r\n" +
				"cmdstat_client|setinfo:calls=2,usec=4,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
				"cmdstat_EVALSHA:calls=12345678901,usec=1,usec_per_call=0.00\r\n",
			want: map[string]int64{"get": 3, "client|setinfo": 2, "evalsha": 12345678901},
		},
		{name: "empty", in: "# Commandstats\r\n", want: map[string]int64{}},
		{name: "no calls field", in: "cmdstat_get:usec=5\r\n", wantErr: true},
		{name: "bad number", in: "cmdstat_get:calls=x\r\n", wantErr: true},
		{name: "no colon", in: "cmdstat_get\r\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCommandStats(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseCommandStats() error = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("parseCommandStats() = %v, want %v", got, tt.want)
			}
		})
	}
}

// fakeTB records Skip and Fatal instead of acting on a real test, so that
// the skip and fail paths of Start can be tested. Methods not defined here
// go to the embedded real test.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
	cleanups        []func()
}

func (f *fakeTB) Helper()                   {}
func (f *fakeTB) Cleanup(fn func())         { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Logf(string, ...any)       {}
func (f *fakeTB) Skip(args ...any)          { f.stop(&f.skipped, fmt.Sprint(args...)) }
func (f *fakeTB) Skipf(s string, a ...any)  { f.stop(&f.skipped, fmt.Sprintf(s, a...)) }
func (f *fakeTB) Fatal(args ...any)         { f.stop(&f.failed, fmt.Sprint(args...)) }
func (f *fakeTB) Fatalf(s string, a ...any) { f.stop(&f.failed, fmt.Sprintf(s, a...)) }

func (f *fakeTB) stop(flag *bool, msg string) {
	*flag = true
	f.msg = msg
	runtime.Goexit()
}

func (f *fakeTB) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	f.cleanups = nil
}

// runFake runs fn in its own goroutine, as the testing package runs a test,
// so that Skip and Fatal can end it with runtime.Goexit.
func runFake(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}
