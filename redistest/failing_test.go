package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/leakcheck"
)

const loading = "LOADING Redis is loading the dataset in memory"

// TestFailingWire sends raw bytes to a Failing server, closes the sending
// side, and reads everything the server writes until it closes: exactly one
// error per command, none for an empty command, and nothing after a
// protocol error.
func TestFailingWire(t *testing.T) {
	reply := "-" + loading + "\r\n"
	ping := "*1\r\n$4\r\nPING\r\n"
	tests := []struct {
		name    string
		chunks  []string // written one after another
		replies int
	}{
		{"array", []string{ping}, 1},
		{"pipeline", []string{ping + "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n" + ping}, 3},
		{"hello", []string{"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"}, 1},
		{"inline", []string{"PING\r\n"}, 1},
		{"inline with a bare LF", []string{"GET k\n"}, 1},
		{"inline and array", []string{"PING\r\n" + ping}, 2},
		{"empty array", []string{"*0\r\n" + ping}, 1},
		{"null array", []string{"*-1\r\n" + ping}, 1},
		{"blank line", []string{"\r\n   \r\n" + ping}, 1},
		{"argument holding CRLF", []string{"*2\r\n$3\r\nGET\r\n$4\r\na\r\nb\r\n"}, 1},
		{"empty argument", []string{"*2\r\n$3\r\nGET\r\n$0\r\n\r\n"}, 1},
		{"byte by byte", strings.Split(ping+ping, ""), 2},
		{"large argument", []string{"*2\r\n$3\r\nSET\r\n$100000\r\n" + strings.Repeat("x", 100_000) + "\r\n"}, 1},
		{"bad array header", []string{"*x\r\n" + ping}, 0},
		{"bad bulk header", []string{"*1\r\n:4\r\nPING\r\n" + ping}, 0},
		{"bulk longer than said", []string{"*1\r\n$3\r\nPING\r\n" + ping}, 0},
		{"negative bulk", []string{"*1\r\n$-1\r\n" + ping}, 0},
		{"cut short", []string{"*2\r\n$3\r\nGET\r\n"}, 0},
		{"after a good command, a bad one", []string{ping + "*1\r\n$9\r\nPING\r\n"}, 1},
	}
	addr := Failing(t, loading)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			for _, chunk := range tt.chunks {
				if _, err := io.WriteString(c, chunk); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(c)
			if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
				t.Fatalf("read: %v", err)
			}
			if want := strings.Repeat(reply, tt.replies); string(got) != want {
				t.Errorf("server wrote %q, want %q", got, want)
			}
		})
	}
}

// isReset reports whether err is a connection reset, which a server that
// closes with unread input causes.
func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset")
}

// TestFailingGoRedis talks to a Failing server through go-redis with its
// default options (RESP3 asked for, maintenance notifications on auto):
// every command, alone or pipelined, fails with the reply, a redis.Error.
func TestFailingGoRedis(t *testing.T) {
	tests := []string{
		loading,
		"READONLY You can't write against a read only replica.",
		"NOSCRIPT No matching script. Please use EVAL.",
		"ERR unexpected",
	}
	for _, reply := range tests {
		t.Run(strings.Fields(reply)[0], func(t *testing.T) {
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: Failing(t, reply), MaxRetries: -1})
			defer rdb.Close()
			check := func(what string, err error) {
				t.Helper()
				var rerr redis.Error
				if err == nil || err.Error() != reply || !errors.As(err, &rerr) {
					t.Errorf("%s = %v, want the redis.Error %q", what, err, reply)
				}
			}
			check("Ping", rdb.Ping(ctx).Err())
			check("Get", rdb.Get(ctx, "k").Err())
			check("EvalSha", rdb.EvalSha(ctx, "0123456789abcdef0123456789abcdef01234567", []string{"k"}, 1).Err())
			cmds, _ := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i := range 3 {
					p.Set(ctx, fmt.Sprint("k", i), i, 0)
				}
				return nil
			})
			if len(cmds) != 3 {
				t.Fatalf("%d pipelined commands came back, want 3", len(cmds))
			}
			for i, cmd := range cmds {
				check(fmt.Sprintf("pipelined command %d", i), cmd.Err())
			}
			// The connection is still in step: one more command gets its
			// own answer.
			check("Ping after the pipeline", rdb.Ping(ctx).Err())
		})
	}
}

// TestFailingCleanup: the cleanup closes open connections, stops
// listening and leaves no goroutine behind.
func TestFailingCleanup(t *testing.T) {
	tb := &fakeTB{TB: t}
	addr := Failing(tb, loading)
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "PING\r\n"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns { // each connection is being served
		buf := make([]byte, len(loading)+3)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
	}
	tb.runCleanups()
	for i, c := range conns {
		if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("connection %d after the cleanup: read %d bytes, %v; want it closed", i, n, err)
		}
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("the server still accepts connections after its cleanup")
	}
	if err := leakcheck.Check(); err != nil {
		t.Error(err)
	}
}

// TestFailingBadReply: a reply that would break the protocol is refused.
func TestFailingBadReply(t *testing.T) {
	for _, reply := range []string{"", "ERR two\r\nlines", "ERR a\nb", "ERR a\r"} {
		t.Run(fmt.Sprintf("%q", reply), func(t *testing.T) {
			tb := &fakeTB{TB: t}
			runFake(func() { Failing(tb, reply) })
			tb.runCleanups()
			if !tb.failed || !strings.Contains(tb.msg, "one non-empty line") {
				t.Errorf("Failing(%q): failed %v, %q; want a failure saying the reply must be one non-empty line", reply, tb.failed, tb.msg)
			}
		})
	}
}

// TestSkipCommand reads commands one at a time from a stream.
func TestSkipCommand(t *testing.T) {
	r := bufio.NewReader(strings.NewReader("*1\r\n$4\r\nPING\r\n*0\r\nGET k\r\n\r\n"))
	for i, want := range []bool{false, true, false, true} {
		empty, err := skipCommand(r)
		if err != nil || empty != want {
			t.Fatalf("command %d: skipCommand = %v, %v; want %v, nil", i, empty, err, want)
		}
	}
	if _, err := skipCommand(r); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
	if _, err := skipCommand(bufio.NewReader(strings.NewReader(strings.Repeat("x", maxInline+1) + "\r\n"))); !errors.Is(err, errProtocol) {
		t.Fatalf("an overlong line: %v, want a protocol error", err)
	}
}
