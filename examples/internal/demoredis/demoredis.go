// Package demoredis gives sluice's examples their Redis: the server named by
// the environment variable REDIS_ADDR when it is set, and otherwise an
// embedded miniredis on a free loopback port, so that every example runs
// with nothing installed.
//
// It is for the example programs only; the library never imports it.
package demoredis

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Server is the Redis an example talks to. Create one with [Start].
type Server struct {
	// Addr is the server's host:port.
	Addr string
	mr   *miniredis.Miniredis // nil when the server is REDIS_ADDR's
}

// Start returns the Redis at REDIS_ADDR, after checking with a PING that it
// answers, or starts an embedded miniredis when REDIS_ADDR is unset or
// empty. It writes one line to w saying which.
func Start(w io.Writer) (*Server, error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("REDIS_ADDR=%s: %w", addr, err)
		}
		fmt.Fprintf(w, "Redis: %s (from REDIS_ADDR)\n", addr)
		return &Server{Addr: addr}, nil
	}
	mr, err := miniredis.Run()
	if err != nil {
		return nil, fmt.Errorf("starting miniredis: %w", err)
	}
	fmt.Fprintf(w, "Redis: an embedded miniredis at %s (set REDIS_ADDR=host:port for a real one)\n", mr.Addr())
	return &Server{Addr: mr.Addr(), mr: mr}, nil
}

// Embedded reports whether s is an embedded miniredis rather than the server
// at REDIS_ADDR.
func (s *Server) Embedded() bool { return s.mr != nil }

// Close stops an embedded miniredis. A server from REDIS_ADDR is left as it
// was.
func (s *Server) Close() {
	if s.mr != nil {
		s.mr.Close()
	}
}
