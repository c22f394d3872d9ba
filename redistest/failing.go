package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// maxInline bounds an inline command's line, and a RESP header line,
	// as Redis bounds inline commands.
	maxInline = 64 << 10
	// maxBulk bounds one argument, as Redis's proto-max-bulk-len does by
	// default.
	maxBulk = 512 << 20
	// maxArgs bounds the arguments of one command.
	maxArgs = 1 << 20
)

// Failing starts an in-process server on a free 127.0.0.1 port that
// answers every command with the error reply reply, and returns its
// address. reply is the error as Redis words it, without the leading '-',
// such as "LOADING Redis is loading the dataset in memory" or
// "READONLY You can't write against a read only replica.": a go-redis
// client reports it as a redis.Error whose text is reply. The server stands
// in for a Redis whose every command fails the same way, and needs no
// redis-server binary.
//
// The server speaks RESP2 well enough for any client: it reads each
// command, an array of bulk strings or an inline command, and answers it
// with exactly one error, so pipelined commands each get theirs; an empty
// command gets no answer, as from Redis, and a connection that breaks the
// protocol is closed. HELLO fails too, after which go-redis goes on in
// RESP2, as it does with an old Redis, so a go-redis client's commands fail
// with reply itself (or, for a client that selects a DB or sets a name on
// connecting, with a setup error that wraps it). The server serves any
// number of connections at once.
//
// The server is closed at tb.Cleanup: it stops listening, closes every
// connection and waits for its goroutines to end. Failing calls tb.Fatal
// if it cannot listen, or if reply is empty or holds a CR or LF, which
// would break the protocol.
func Failing(tb testing.TB, reply string) string {
	tb.Helper()
	if reply == "" || strings.ContainsAny(reply, "\r\n") {
		tb.Fatalf("redistest: Failing(%q): the reply must be one non-empty line", reply)
		return ""
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: failing server listen: %v", err)
		return ""
	}
	s := &failingServer{ln: ln, reply: []byte("-" + reply + "\r\n"), conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.serve()
	tb.Cleanup(s.close)
	return ln.Addr().String()
}

// failingServer is the server behind [Failing].
type failingServer struct {
	ln    net.Listener
	reply []byte // the whole error reply, "-...\r\n"
	wg    sync.WaitGroup

	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
}

// serve accepts connections until the listener is closed.
func (s *failingServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A temporary failure such as running out of descriptors:
			// back off briefly instead of spinning.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handle(c)
	}
}

// handle answers the commands on c until it is closed or breaks the
// protocol.
func (s *failingServer) handle(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	for {
		empty, err := skipCommand(r)
		if err != nil {
			_ = w.Flush() // the answers to the commands before
			return
		}
		if !empty {
			if _, err := w.Write(s.reply); err != nil {
				return
			}
		}
		// Answer a pipeline in one write, once its commands are read.
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// close stops listening, closes every connection and waits for the
// goroutines to end.
func (s *failingServer) close() {
	s.mu.Lock()
	s.closed = true
	s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// errProtocol is a client's breach of RESP.
var errProtocol = errors.New("protocol error")

// skipCommand reads one command from r and throws it away. It reports
// whether the command was empty (an array of no elements or a blank inline
// line), which Redis does not answer, and fails on a protocol error or
// when r fails.
func skipCommand(r *bufio.Reader) (empty bool, err error) {
	line, err := readLine(r)
	if err != nil {
		return false, err
	}
	if !strings.HasPrefix(line, "*") {
		// An inline command: words separated by spaces.
		return strings.TrimSpace(line) == "", nil
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n > maxArgs {
		return false, fmt.Errorf("%w: array header %q", errProtocol, line)
	}
	for range n {
		line, err := readLine(r)
		if err != nil {
			return false, err
		}
		size, err := strconv.Atoi(strings.TrimPrefix(line, "$"))
		if !strings.HasPrefix(line, "$") || err != nil || size < 0 || size > maxBulk {
			return false, fmt.Errorf("%w: bulk header %q", errProtocol, line)
		}
		if _, err := r.Discard(size); err != nil {
			return false, err
		}
		if end, err := readLine(r); err != nil {
			return false, err
		} else if end != "" {
			return false, fmt.Errorf("%w: %d bytes after a bulk string of %d", errProtocol, len(end), size)
		}
	}
	return n <= 0, nil
}

// readLine reads a line ended by CRLF (or a bare LF, as Redis accepts in
// inline commands) and returns it without its end, failing beyond
// maxInline bytes.
func readLine(r *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(b)+len(chunk) > maxInline {
			return "", fmt.Errorf("%w: a line longer than %d bytes", errProtocol, maxInline)
		}
		b = append(b, chunk...)
		switch {
		case err == nil:
			b = b[:len(b)-1]
			if n := len(b); n > 0 && b[n-1] == '\r' {
				b = b[:n-1]
			}
			return string(b), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(b) > 0:
			return "", io.ErrUnexpectedEOF
		default:
			return "", err
		}
	}
}
