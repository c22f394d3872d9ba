package redisstore

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/internal/pause"
)

// TestLaneReadInts reads replies as a lane does: a list of integers (or
// of bulk strings that are integers) is an answer, an error reply is a
// redis.Error that keeps the connection, and anything else is an error
// that closes it.
func TestLaneReadInts(t *testing.T) {
	cases := []struct {
		name, reply string
		want        []int64
		redisErr    string // a Redis error reply
		protocol    bool   // errLaneProtocol
		eof         bool   // the stream ended
	}{
		{name: "integers", reply: "*3\r\n:1\r\n:0\r\n:-42\r\n", want: []int64{1, 0, -42}},
		{name: "empty list", reply: "*0\r\n", want: []int64{}},
		{name: "bulk integers", reply: "*2\r\n$2\r\n17\r\n$3\r\n-\x35\x30\r\n", want: []int64{17, -50}},
		{name: "extremes", reply: "*2\r\n:9223372036854775807\r\n:-9223372036854775807\r\n", want: []int64{math.MaxInt64, -math.MaxInt64}},
		{name: "error reply", reply: "-NOSCRIPT No matching script.\r\n", redisErr: "NOSCRIPT No matching script."},
		{name: "moved", reply: "-MOVED 3999 127.0.0.1:6381\r\n", redisErr: "MOVED 3999 127.0.0.1:6381"},
		{name: "status", reply: "+OK\r\n", protocol: true},
		{name: "nil element", reply: "*1\r\n$-1\r\n", protocol: true},
		{name: "nested list", reply: "*1\r\n*1\r\n:1\r\n", protocol: true},
		{name: "overflow", reply: "*1\r\n:9223372036854775808\r\n", protocol: true},
		{name: "not a number", reply: "*1\r\n:1x\r\n", protocol: true},
		{name: "bulk not a number", reply: "*1\r\n$2\r\nab\r\n", protocol: true},
		{name: "bulk size wrong", reply: "*1\r\n$3\r\n12\r\n", protocol: true},
		{name: "negative count", reply: "*-1\r\n", protocol: true},
		{name: "no CR", reply: "*1\n", protocol: true},
		{name: "long line", reply: "*1\r\n:" + strings.Repeat("1", 600) + "\r\n", protocol: true},
		{name: "cut short", reply: "*2\r\n:1\r\n", eof: true},
		{name: "nothing", reply: "", eof: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lc := &laneConn{rd: bufio.NewReaderSize(strings.NewReader(tc.reply), 512)}
			got, err := lc.readInts(nil)
			var rerr redis.Error
			switch {
			case tc.want != nil:
				if err != nil || !slices.Equal(got, tc.want) {
					t.Fatalf("readInts = %v, %v; want %v", got, err, tc.want)
				}
			case tc.redisErr != "":
				if !errors.As(err, &rerr) || err.Error() != tc.redisErr {
					t.Fatalf("readInts error = %v (%T), want the Redis error %q", err, err, tc.redisErr)
				}
			case tc.protocol:
				if !errors.Is(err, errLaneProtocol) {
					t.Fatalf("readInts = %v, %v; want errLaneProtocol", got, err)
				}
			case tc.eof:
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("readInts = %v, %v; want the end of the stream", got, err)
				}
			}
		})
	}
}

// TestLaneEncodes checks appendEvalSha's request byte for byte, and that
// it refuses an argument it does not encode.
func TestLaneEncodes(t *testing.T) {
	got, ok := appendEvalSha(nil, "abc", []string{"k{1}"}, []any{"10", 7, int64(-3)})
	want := "*7\r\n$7\r\nevalsha\r\n$3\r\nabc\r\n$1\r\n1\r\n$4\r\nk{1}\r\n$2\r\n10\r\n$1\r\n7\r\n$2\r\n-3\r\n"
	if !ok || string(got) != want {
		t.Fatalf("appendEvalSha = %q, %v; want %q", got, ok, want)
	}
	if _, ok := appendEvalSha(nil, "abc", nil, []any{1.5}); ok {
		t.Fatal("appendEvalSha encoded a float64")
	}
}

// FuzzLaneParseInt holds parseInt to strconv.ParseInt on every input.
func FuzzLaneParseInt(f *testing.F) {
	for _, s := range []string{"0", "-1", "9223372036854775807", "-9223372036854775808", "18446744073709551616", "+1", "", "-", "01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseInt([]byte(s))
		want, err := strconv.ParseInt(s, 10, 64)
		if err != nil || strings.HasPrefix(s, "+") || want == math.MinInt64 {
			// parseInt takes no sign '+' (RESP writes none) and
			// refuses MinInt64 (no script returns it).
			if ok && (err != nil || strings.HasPrefix(s, "+")) {
				t.Fatalf("parseInt(%q) = %d, true; strconv: %v", s, got, err)
			}
			return
		}
		if !ok && len(s) > 20 {
			return // leading zeros RESP never writes: refused, not misread
		}
		if !ok || got != want {
			t.Fatalf("parseInt(%q) = %d, %v; want %d", s, got, ok, want)
		}
	})
}

// TestLaneRefuses names what keeps a client's connections from being
// reproduced.
func TestLaneRefuses(t *testing.T) {
	cases := []struct {
		name string
		rdb  redis.Scripter
		want string // in the error; "" for none
	}{
		{"plain client", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), ""},
		{"OnConnect", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", OnConnect: onConnectNop}), "OnConnect"},
		{"cluster OnConnect", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, OnConnect: onConnectNop}), "OnConnect"},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), ""},
		{"other scripter", laneScripter{}, "redisstore.laneScripter"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := LaneProblem(tc.rdb)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("LaneProblem = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("LaneProblem = %v, want an error naming %q", err, tc.want)
			}
			if c, ok := tc.rdb.(interface{ Close() error }); ok {
				_ = c.Close()
			}
		})
	}
}

// TestLaneDeadConnection: a connection the server closed while it sat in
// the lane is found dead on its next call, before any reply: the call is
// handed to the client (errOffLane) and the lane's other idle connections
// are closed too.
func TestLaneDeadConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	l := &lane{opt: &redis.Options{Addr: ln.Addr().String(), Network: "tcp", Dialer: dialTCP}, max: 4, idle: int64(laneIdle)}
	dl := farDeadline()
	a, _, err := l.get(t.Context(), dl)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := l.get(t.Context(), dl)
	if err != nil {
		t.Fatal(err)
	}
	l.put(a, nil)
	l.put(b, nil)
	// The server closes both.
	(<-accepted).Close()
	(<-accepted).Close()
	_, err = l.eval(t.Context(), dl, "abc", []string{"k"}, nil, nil)
	if err != errOffLane {
		t.Fatalf("eval on a dead connection = %v, want errOffLane", err)
	}
	l.mu.Lock()
	open, idle := l.open, len(l.free)
	l.mu.Unlock()
	if open != 0 || idle != 0 {
		t.Fatalf("after a dead connection: %d open, %d idle; want none", open, idle)
	}

	// Idle past laneIdle (here, at once), a connection is looked at
	// before it is used: open, it is used again; found closed, it is
	// dialled anew, and the call goes on the lane.
	l.idle = 0
	c, _, err := l.get(t.Context(), dl)
	if err != nil {
		t.Fatal(err)
	}
	l.put(c, nil)
	server := <-accepted
	if c2, reused, err := l.get(t.Context(), dl); err != nil || !reused || c2 != c {
		t.Fatalf("an idle open connection: get = %v, reused %v; want it again", err, reused)
	}
	l.put(c, nil)
	server.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c2, reused, err := l.get(t.Context(), dl)
		if err != nil {
			t.Fatal(err)
		}
		l.put(c2, nil)
		if !reused {
			break // the closed one was found by alive and replaced
		}
		if time.Now().After(deadline) {
			t.Fatal("a connection closed by the server was still reused 5s later")
		}
		time.Sleep(time.Millisecond) // the server's close is on its way
	}
	l.close()
	if lc, _, err := l.get(t.Context(), dl); lc != nil || err != errOffLane {
		t.Fatalf("get on a closed lane = %v, %v; want errOffLane", lc, err)
	}
}

func onConnectNop(context.Context, *redis.Conn) error { return nil }

// laneScripter is a redis.Scripter that is no go-redis client.
type laneScripter struct{ redis.Scripter }

func dialTCP(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func farDeadline() time.Time { return time.Now().Add(time.Minute) }

// TestLaneFresh: a connection idle past the client's ConnMaxIdleTime, or
// older than its ConnMaxLifetime, is not used again; others are.
func TestLaneFresh(t *testing.T) {
	const s = int64(time.Second)
	cases := []struct {
		name              string
		maxIdle, lifetime time.Duration
		idle, age         int64
		want              bool
	}{
		{"defaults", 0, 0, s, 10 * s, true},
		{"within idle time", 2 * time.Second, 0, s, 10 * s, true},
		{"past idle time", 2 * time.Second, 0, 3 * s, 10 * s, false},
		{"idle time below the peek's", 500 * time.Millisecond, 0, s, 10 * s, false},
		{"within lifetime", 0, 20 * time.Second, s, 10 * s, true},
		{"past lifetime", 0, 5 * time.Second, s, 10 * s, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := &lane{opt: &redis.Options{ConnMaxIdleTime: tc.maxIdle, ConnMaxLifetime: tc.lifetime}, idle: int64(time.Hour)}
			now := pause.Now()
			lc := &laneConn{used: now - tc.idle, born: now - tc.age}
			if got := l.fresh(lc); got != tc.want {
				t.Fatalf("fresh = %v, want %v", got, tc.want)
			}
		})
	}
}
