// Package demoserve runs the framework examples: flags, the demo Redis, the
// engine, a listener, the curl lines to try, and a clean shutdown, so each
// example's main.go shows only its limits.
package demoserve

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/sluicehq/sluice/examples/internal/demoredis"
)

// Server is what an example serves: an *http.Server (see [HTTP]) or a
// framework's own server behind the same two methods.
type Server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
}

// HTTP serves h with an http.Server.
func HTTP(h http.Handler) Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
}

// FrameworkTry is the curl lines of the http, gin, echo and fiber examples;
// %[1]s is the base URL.
const FrameworkTry = `listening on %[1]s; try:
  curl -i -H 'X-Tenant-ID: acme' %[1]s/hello           # 200
  curl -i %[1]s/hello                                  # 400: no tenant
  curl -i -H 'X-Tenant-ID: acme' '%[1]s/search?q=go'   # 200
  curl -i -H 'X-Tenant-ID: acme' '%[1]s/search?q=go'   # 200
  curl -i -H 'X-Tenant-ID: acme' '%[1]s/search?q=go'   # 429: 2 searches a minute
`

// Run parses -addr from args (default $ADDR or :8080), opens the demo Redis
// (an embedded miniredis unless REDIS_ADDR is set), asks build for the
// server given the Redis address (the example makes its own client and
// engine there, as a user would, and returns the client for Run to close
// after serving), prints try with the base URL, and serves until ctx ends.
func Run(ctx context.Context, name string, args []string, stdout io.Writer, try string, build func(redisAddr string) (Server, io.Closer, error)) error {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	addr := fs.String("addr", cmp.Or(os.Getenv("ADDR"), ":8080"), "listen `address` (the default comes from $ADDR when set)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	redisSrv, err := demoredis.Start(stdout)
	if err != nil {
		return err
	}
	defer redisSrv.Close()
	srv, client, err := build(redisSrv.Addr)
	if client != nil {
		defer client.Close()
	}
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, try, fmt.Sprintf("http://localhost:%d", ln.Addr().(*net.TCPAddr).Port))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}
