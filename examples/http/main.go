// Command http serves a small API on net/http with three sluice limits: 100
// requests a minute per client address, 600 per tenant, and 2 searches a
// minute per client. It uses an embedded miniredis unless REDIS_ADDR is set.
//
//	go run ./examples/http [-addr :8080]
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoredis"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("http", flag.ExitOnError)
	addr := fs.String("addr", cmp.Or(os.Getenv("ADDR"), ":8080"), "listen `address` (the default comes from $ADDR when set)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rdb, closeRedis, err := demoredis.Open(stdout)
	if err != nil {
		return err
	}
	defer closeRedis()
	lim, err := core.New(rdb)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, %s\n", r.Header.Get("X-Tenant-ID"))
	})
	// Searches are expensive: 2 a minute per client. keyfunc.Route needs the
	// pattern the mux matched, so this middleware wraps the route's handler.
	perSearch := httplimit.New(lim, core.PerMinute(2), keyfunc.Join(keyfunc.IP(), keyfunc.Route()))
	mux.Handle("GET /search", perSearch(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "results for %q\n", r.URL.Query().Get("q"))
	})))

	// Every request: 100 a minute per client address, then 600 a minute per
	// tenant. Clients write X-Tenant-ID themselves: trust it only behind a
	// gateway that sets it, or key by keyfunc.TenantValue (examples/tenants).
	perIP := httplimit.New(lim, core.PerMinute(100), keyfunc.IP())
	perTenant := httplimit.New(lim, core.PerMinute(600), keyfunc.Tenant("X-Tenant-ID"))
	srv := &http.Server{Handler: perIP(perTenant(mux)), ReadHeaderTimeout: 5 * time.Second}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, tryIt, fmt.Sprintf("http://localhost:%d", ln.Addr().(*net.TCPAddr).Port))
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

const tryIt = `listening on %[1]s; try:
  curl -i -H 'X-Tenant-ID: acme' %[1]s/hello           # 200
  curl -i %[1]s/hello                                  # 400: no tenant
  curl -i -H 'X-Tenant-ID: acme' '%[1]s/search?q=go'   # 200
  curl -i -H 'X-Tenant-ID: acme' '%[1]s/search?q=go'   # 200
  curl -i -H 'X-Tenant-ID: acme' '%[1]s/search?q=go'   # 429: 2 searches a minute
`
