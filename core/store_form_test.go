package core

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
	"github.com/sluicehq/sluice/redistest"
)

// recordHook records the arguments of every command a client processes,
// as hooks (tracing, say) see them.
type recordHook struct {
	mu   sync.Mutex
	cmds [][]string
}

func (h *recordHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *recordHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *recordHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := make([]string, len(cmd.Args()))
		for i, a := range cmd.Args() {
			args[i] = fmt.Sprint(a)
		}
		h.mu.Lock()
		h.cmds = append(h.cmds, args)
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

// scripts returns the recorded calls of the bucket script (EVALSHA and
// EVAL), and forgets every recorded command.
func (h *recordHook) scripts() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out [][]string
	for _, c := range h.cmds {
		if (c[0] == "evalsha" && c[1] == redisstore.BucketScript.Hash()) || (c[0] == "eval" && c[1] == redisstore.BucketLua) {
			out = append(out, c)
		}
	}
	h.cmds = nil
	return out
}

// TestScriptCallOnTheWire checks what a decision sends, read as integers
// straight off the wire (see runInts): the same command as
// redis.Script.Run, as a client's hooks see it; EVAL with the script's
// source after Redis forgot its scripts; and the same decision either way.
func TestScriptCallOnTheWire(t *testing.T) {
	for _, batching := range []int{0, 4} {
		t.Run(fmt.Sprintf("batching=%d", batching), func(t *testing.T) { testScriptCallOnTheWire(t, batching) })
	}
}

func testScriptCallOnTheWire(t *testing.T, batching int) {
	srv := redistest.Start(t)
	rdb := redistest.NewClient(t, srv.Addr())
	hook := &recordHook{}
	rdb.AddHook(hook)
	ctx := context.Background()
	lim, err := New(rdb, WithBatching(batching))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	limit := Limit{Rate: 3, Period: 60e9, Burst: 3}
	p := mustPlan(t, limit)
	rkey := redisstore.RedisKey(redisOf(lim).Prefix(), p.FP, "k")

	for i, tc := range []struct {
		flush bool     // SCRIPT FLUSH first
		want  []string // the script commands sent, by name
	}{
		{want: []string{"evalsha", "eval"}}, // a new server has no scripts
		{want: []string{"evalsha"}},
		{flush: true, want: []string{"evalsha", "eval"}},
	} {
		if tc.flush {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		hook.scripts()
		res, err := lim.Allow(ctx, "k", limit)
		if err != nil {
			t.Fatalf("decision %d: %v", i, err)
		}
		if !res.Allowed || res.Remaining != 2-i {
			t.Fatalf("decision %d: allowed %v, remaining %d; want allowed, %d left", i, res.Allowed, res.Remaining, 2-i)
		}
		sent := hook.scripts()
		var names []string
		for _, c := range sent {
			names = append(names, c[0])
		}
		if !slices.Equal(names, tc.want) {
			t.Fatalf("decision %d sent %v, want %v", i, names, tc.want)
		}
		// The command as redis.Script.Run would send it.
		wantArgs := []string{"evalsha", redisstore.BucketScript.Hash(), "1", rkey}
		for _, a := range p.Args[1:4] {
			wantArgs = append(wantArgs, fmt.Sprint(a))
		}
		if got := sent[0]; !slices.Equal(got, wantArgs) {
			t.Fatalf("decision %d sent %q, want %q", i, got, wantArgs)
		}
		if len(sent) == 2 && (sent[1][1] != redisstore.BucketLua || !slices.Equal(sent[1][2:], wantArgs[2:])) {
			t.Fatalf("decision %d: EVAL sent %q (source cut), want the bucket script's source and %q", i, sent[1][2:], wantArgs[2:])
		}
	}
}

// TestScriptCallBadReply checks that a reply that is not a list of
// integers fails the call with an error, as before replies were read as
// integers off the wire: never a decision made of part of it.
func TestScriptCallBadReply(t *testing.T) {
	// A server that answers every command with a list holding a string
	// that is not a number, then with +OK.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					if strings.Contains(strings.ToLower(string(buf[:n])), "hello") {
						_, _ = c.Write([]byte("-ERR unknown command 'HELLO'\r\n"))
						continue
					}
					_, _ = c.Write([]byte("*2\r\n$3\r\nabc\r\n:1\r\n"))
				}
			}()
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, MaxRetries: -1})
	defer rdb.Close()
	_, err = redisstore.RunInts(context.Background(), rdb, redisstore.BucketScript, []string{"k"}, []any{1, 2, 3}, false)
	if err == nil {
		t.Fatal("a reply holding a string that is not a number was decoded")
	}
}
