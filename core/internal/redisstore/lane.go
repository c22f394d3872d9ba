package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/internal/pause"
)

// This file is a node's lane (core.WithOwnConnections): a few connections
// the store dials itself, with the node's client's own dialer,
// credentials, database and name, on which it sends a decision's script
// call when the decision goes alone, and a batch's on a node of one call
// per batch (see onLaneBatch). Through the client's pool, each call
// also pays a health check (a system call before every command), the
// pool's bookkeeping, two socket deadlines, the hooks and the reply's
// general reader; on a lane it is one write of a request encoded in
// place, one deadline and a reply read as the integers it is (bench/README.md
// has what that saves). Everything else stays on the client: pipelined
// batches, settlements, loading the script after NOSCRIPT, Cluster
// redirections.
//
// A lane speaks RESP2 and holds at most max connections; a call that finds
// them all busy, or a request it cannot encode, goes through the client
// instead (errOffLane). A connection is closed on any error but a Redis
// error reply, after which the next call dials again; one idle for longer
// than laneIdle is first checked for a close by the server (see alive).
// A call that meets a connection closed before any reply, or a server
// that is no master to it (READONLY, LOADING, MASTERDOWN: the script did
// not run), closes the lane's idle connections and goes through the client,
// which checks its own and follows a failover.

// errOffLane says a call was not sent on the lane: send it through the
// client.
var errOffLane = errors.New("redisstore: not sent on the lane")

// laneIdle is how long a lane connection may sit unused before it is
// checked for a close by the server (see alive) before its next use.
const laneIdle = time.Second

// LaneProblem returns why rdb's connections cannot be reproduced by a
// lane (core.WithOwnConnections), or nil when they can: a client's
// OnConnect hook or streaming credentials cannot run on a connection the
// store dials itself.
func LaneProblem(rdb redis.Scripter) error {
	switch c := rdb.(type) {
	case *redis.Client:
		o := c.Options()
		return laneOptions("client", o.OnConnect != nil, o.StreamingCredentialsProvider != nil)
	case *redis.ClusterClient:
		o := c.Options()
		return laneOptions("Cluster client", o.OnConnect != nil, o.StreamingCredentialsProvider != nil)
	case *redis.Ring:
		o := c.Options()
		return laneOptions("Ring", o.OnConnect != nil, o.StreamingCredentialsProvider != nil)
	}
	return fmt.Errorf("core: WithOwnConnections: the client is a %T; the limiter dials its own connections only for *redis.Client, *redis.ClusterClient and *redis.Ring", rdb)
}

// laneOptions is LaneProblem's verdict on a go-redis client (named kind)
// with an OnConnect hook or not, and streaming credentials or not.
func laneOptions(kind string, onConnect, streaming bool) error {
	switch {
	case onConnect:
		return fmt.Errorf("core: WithOwnConnections: the %s has an OnConnect hook, which cannot run on the limiter's own connections", kind)
	case streaming:
		return fmt.Errorf("core: WithOwnConnections: the %s has a StreamingCredentialsProvider, which the limiter's own connections cannot follow", kind)
	}
	return nil
}

// lane is a node's own connections (see the top of this file).
type lane struct {
	opt  *redis.Options // the node's client's: how to dial and set up a connection
	max  int            // connections open at most
	idle int64          // laneIdle, in the pause clock's nanoseconds (a test sets 0)

	mu     sync.Mutex
	free   []*laneConn // idle connections, the last used last
	open   int         // connections open: idle or in use
	closed bool
}

// laneConn is one of a lane's connections.
type laneConn struct {
	c    net.Conn
	rd   *bufio.Reader
	wb   []byte // the request being written, kept for the next
	used int64  // pause.Now() at the end of its last use
	born int64  // pause.Now() when it was dialled
	dead bool   // its last call found it closed before any reply came
	read bool   // some of the current reply has been read
}

// newLane returns the lane of the node whose client is c, holding at most
// max connections; nil for a nil client or a client whose connections a
// lane cannot reproduce (see LaneProblem).
func newLane(c *redis.Client, max int) *lane {
	if c == nil || LaneProblem(c) != nil {
		return nil
	}
	o := c.Options()
	if o.Dialer == nil {
		return nil
	}
	return &lane{opt: o, max: max, idle: int64(laneIdle)}
}

// eval sends EVALSHA of the script whose SHA1 is sha, with keys and args,
// on one of the lane's connections, under the deadline dl, and returns
// its reply, a list of integers, appended to dst. It returns errOffLane,
// having sent nothing, when every connection is busy or an argument is
// of a type it does not encode; a Redis error reply as a redis.Error.
func (l *lane) eval(ctx context.Context, dl time.Time, sha string, keys []string, args []any, dst []int64) ([]int64, error) {
	lc, reused, err := l.get(ctx, dl)
	if lc == nil {
		return nil, err
	}
	var ok bool
	if lc.wb, ok = appendEvalSha(lc.wb[:0], sha, keys, args); !ok {
		l.put(lc, nil)
		return nil, errOffLane
	}
	vals, err := lc.roundTrip(dl, dst)
	if err != nil && reused && lc.dead {
		// A connection that was open when last used, and was found
		// closed before any of its reply came (a restart, an idle
		// timeout, CLIENT KILL): its idle siblings likely are too, and
		// the call goes through the client, which checks its own
		// connections. (Had the server run the call and closed the
		// connection before replying, the bucket is charged twice:
		// an error toward denying, never toward admitting.)
		l.put(lc, err)
		l.dropIdle()
		return nil, errOffLane
	}
	l.put(lc, err)
	if err != nil && switched(err) {
		// The server is not (or no longer) a master that takes the call,
		// which did not run: the lane's other connections lead there
		// too, and the client, which follows a failover, sends it again.
		l.dropIdle()
		return nil, errOffLane
	}
	return vals, err
}

// get returns an idle connection (reused), or a new one dialled under dl
// if the lane has room; nil with errOffLane when it has none, or with the
// dial's error.
func (l *lane) get(ctx context.Context, dl time.Time) (lc *laneConn, reused bool, err error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, false, errOffLane
	}
	if n := len(l.free); n > 0 {
		lc := l.free[n-1]
		l.free = l.free[:n-1]
		l.mu.Unlock()
		if l.fresh(lc) {
			return lc, true, nil
		}
		_ = lc.c.Close()
		lc, err := l.redial(ctx, dl)
		return lc, false, err
	}
	if l.open >= l.max {
		l.mu.Unlock()
		return nil, false, errOffLane
	}
	l.open++
	l.mu.Unlock()
	lc, err = l.redial(ctx, dl)
	return lc, false, err
}

// warm opens one connection if the lane has none, so that the first
// decision does not pay the dial (Limiter.Ready), by ctx's deadline or
// within the client's DialTimeout and a second.
func (l *lane) warm(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	if l.closed || l.open > 0 {
		l.mu.Unlock()
		return nil
	}
	l.open++
	l.mu.Unlock()
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(l.opt.DialTimeout + time.Second)
	}
	lc, err := l.redial(ctx, dl)
	if err != nil {
		return err
	}
	l.put(lc, nil)
	return nil
}

// fresh reports whether lc, idle in the lane, may carry a call: younger
// than the client's ConnMaxLifetime and idle for less than its
// ConnMaxIdleTime (a middlebox may have dropped it without a word), and,
// idle for laneIdle or more, still open (see alive).
func (l *lane) fresh(lc *laneConn) bool {
	now := pause.Now()
	idle := now - lc.used
	switch {
	case l.opt.ConnMaxIdleTime > 0 && idle >= int64(l.opt.ConnMaxIdleTime):
		return false
	case l.opt.ConnMaxLifetime > 0 && now-lc.born >= int64(l.opt.ConnMaxLifetime):
		return false
	}
	return idle < l.idle || alive(lc.c)
}

// dropIdle closes the lane's idle connections.
func (l *lane) dropIdle() {
	l.mu.Lock()
	free := l.free
	l.free = nil
	l.open -= len(free)
	l.mu.Unlock()
	for _, lc := range free {
		_ = lc.c.Close()
	}
}

// redial dials a connection in a place already counted in l.open, giving
// the place back if it fails.
func (l *lane) redial(ctx context.Context, dl time.Time) (*laneConn, error) {
	lc, err := l.dial(ctx, dl)
	if err != nil {
		l.mu.Lock()
		l.open--
		l.mu.Unlock()
		return nil, err
	}
	return lc, nil
}

// put gives lc back after a call that ended with err: kept for the next
// call after an answer or a Redis error reply, closed after anything else
// (its stream may hold a late reply) or once the lane is closed.
func (l *lane) put(lc *laneConn, err error) {
	var rerr redis.Error
	keep := err == nil || (errors.As(err, &rerr) && !switched(err))
	lc.used = pause.Now()
	l.mu.Lock()
	if keep && !l.closed {
		l.free = append(l.free, lc)
		l.mu.Unlock()
		return
	}
	l.open--
	l.mu.Unlock()
	_ = lc.c.Close()
}

// switched reports whether err, a Redis error reply, says the server is no
// longer the master the lane means to reach (a failed-over master, now a
// replica, or one still loading): the next call must dial again, which on
// a Sentinel failover client finds the new master.
func switched(err error) bool {
	return redis.HasErrorPrefix(err, "READONLY") || redis.HasErrorPrefix(err, "LOADING") || redis.HasErrorPrefix(err, "MASTERDOWN")
}

// close closes the lane's idle connections, and the others as they are
// given back.
func (l *lane) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.dropIdle()
}

// dial opens and sets up a connection as the client would its own: its
// dialer (with its TLS), then AUTH, SELECT and CLIENT SETNAME as its
// options ask, in one round trip, under dl.
func (l *lane) dial(ctx context.Context, dl time.Time) (*laneConn, error) {
	o := l.opt
	dctx, cancel := context.WithDeadline(ctx, dl)
	defer cancel()
	c, err := o.Dialer(dctx, o.Network, o.Addr)
	if err != nil {
		return nil, err
	}
	now := pause.Now()
	lc := &laneConn{c: c, rd: bufio.NewReaderSize(c, 512), used: now, born: now}
	var setup [][]string
	user, pass := o.Username, o.Password
	switch {
	case o.CredentialsProviderContext != nil:
		if user, pass, err = o.CredentialsProviderContext(dctx); err != nil {
			_ = c.Close()
			return nil, err
		}
	case o.CredentialsProvider != nil:
		user, pass = o.CredentialsProvider()
	}
	switch {
	case user != "":
		setup = append(setup, []string{"AUTH", user, pass})
	case pass != "":
		setup = append(setup, []string{"AUTH", pass})
	}
	if o.DB != 0 {
		setup = append(setup, []string{"SELECT", strconv.Itoa(o.DB)})
	}
	if o.ClientName != "" {
		setup = append(setup, []string{"CLIENT", "SETNAME", o.ClientName})
	}
	if len(setup) == 0 {
		return lc, nil
	}
	for _, cmd := range setup {
		lc.wb = appendArray(lc.wb, len(cmd))
		for _, a := range cmd {
			lc.wb = appendBulk(lc.wb, a)
		}
	}
	err = c.SetDeadline(dl)
	if err == nil {
		_, err = c.Write(lc.wb)
	}
	for range setup {
		if err == nil {
			err = lc.readStatus()
		}
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("core: setting up the limiter's own connection to %s: %w", o.Addr, err)
	}
	return lc, nil
}

// roundTrip writes the request in lc.wb and reads its reply, a list of
// integers, appended to dst, all by dl.
func (lc *laneConn) roundTrip(dl time.Time, dst []int64) ([]int64, error) {
	lc.dead = false
	if err := lc.c.SetDeadline(dl); err != nil {
		return nil, err
	}
	if _, err := lc.c.Write(lc.wb); err != nil {
		lc.dead = closedErr(err)
		return nil, err
	}
	lc.read = false
	vals, err := lc.readInts(dst)
	lc.dead = err != nil && !lc.read && closedErr(err)
	return vals, err
}

// closedErr reports whether err says the connection was closed by the
// other end (as opposed to a timeout, or a reply the lane cannot read).
func closedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// readStatus reads a simple reply (+OK), or returns the error reply.
func (lc *laneConn) readStatus() error {
	line, err := lc.line()
	if err != nil {
		return err
	}
	switch line[0] {
	case '+':
		return nil
	case '-':
		return replyError(line[1:])
	}
	return fmt.Errorf("%w: %q where a status was due", errLaneProtocol, line)
}

// errLaneProtocol marks a reply a lane cannot read: its connection is
// closed (put keeps only answers and Redis error replies).
var errLaneProtocol = errors.New("core: unexpected reply on the limiter's own connection")

// readInts reads a reply that is a list of integers (or of bulk strings
// that are integers), appended to dst; an error reply as a replyError.
func (lc *laneConn) readInts(dst []int64) ([]int64, error) {
	line, err := lc.line()
	if err != nil {
		return nil, err
	}
	switch line[0] {
	case '-':
		return nil, replyError(line[1:])
	case '*':
	default:
		return nil, fmt.Errorf("%w: %q where a list was due", errLaneProtocol, line)
	}
	n, ok := parseInt(line[1:])
	if !ok || n < 0 || n > 1<<20 {
		return nil, fmt.Errorf("%w: list header %q", errLaneProtocol, line)
	}
	for i := int64(0); i < n; i++ {
		if line, err = lc.line(); err != nil {
			return nil, err
		}
		var v int64
		switch line[0] {
		case ':':
			v, ok = parseInt(line[1:])
		case '$':
			var size int64
			if size, ok = parseInt(line[1:]); ok && size >= 0 && size <= 20 {
				if line, err = lc.line(); err != nil {
					return nil, err
				}
				v, ok = parseInt(line)
				ok = ok && int64(len(line)) == size
			} else {
				ok = false
			}
		default:
			ok = false
		}
		if !ok {
			return nil, fmt.Errorf("%w: %q in a list of integers", errLaneProtocol, line)
		}
		dst = append(dst, v)
	}
	return dst, nil
}

// line reads one line of the reply, without its CRLF; never empty.
func (lc *laneConn) line() ([]byte, error) {
	line, err := lc.rd.ReadSlice('\n')
	if len(line) > 0 {
		lc.read = true
	}
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: a line longer than %d bytes", errLaneProtocol, lc.rd.Size())
		}
		if errors.Is(err, io.EOF) && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line %q", errLaneProtocol, line)
	}
	return line[:len(line)-2], nil
}

// parseInt parses a decimal integer, as RESP writes one.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<63-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	if !neg {
		if v > 1<<63-1 {
			return 0, false
		}
		return int64(v), true
	}
	return -int64(v), true
}

// replyError is a Redis error reply read on a lane: a redis.Error, so
// that the store judges it as it does the client's.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks e as a reply of the server (redis.Error).
func (replyError) RedisError() {}

// appendEvalSha appends EVALSHA sha with keys and args, RESP-encoded, to
// b; ok is false for an argument of a type it does not encode (sent
// through the client instead).
func appendEvalSha(b []byte, sha string, keys []string, args []any) ([]byte, bool) {
	b = appendArray(b, 3+len(keys)+len(args))
	b = appendBulk(b, "evalsha")
	b = appendBulk(b, sha)
	b = appendBulkInt(b, int64(len(keys)))
	for _, k := range keys {
		b = appendBulk(b, k)
	}
	for _, a := range args {
		switch v := a.(type) {
		case string:
			b = appendBulk(b, v)
		case int:
			b = appendBulkInt(b, int64(v))
		case int64:
			b = appendBulkInt(b, v)
		default:
			return b, false
		}
	}
	return b, true
}

func appendArray(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

func appendBulk(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

func appendBulkInt(b []byte, v int64) []byte {
	var num [20]byte
	s := strconv.AppendInt(num[:0], v, 10)
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}
