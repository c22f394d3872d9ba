// Command fiber serves a small API on fiber v2 with three sluice limits: 100
// requests a minute per client address, 600 per tenant, and 2 searches a
// minute per client. It uses an embedded miniredis unless REDIS_ADDR is set.
//
//	go run ./examples/fiber [-addr :8080]
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoredis"
	"github.com/sluicehq/sluice/fiberlimit"
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
	fs := flag.NewFlagSet("fiber", flag.ExitOnError)
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

	app := fiber.New(fiber.Config{DisableStartupMessage: true, IdleTimeout: 5 * time.Second})
	// Every request: 100 a minute per client address, then 600 a minute per
	// tenant. Clients write X-Tenant-ID themselves: trust it only behind a
	// gateway that sets it, or key by keyfunc.TenantValue (examples/tenants).
	app.Use(fiberlimit.New(lim, core.PerMinute(100), keyfunc.IP()))
	app.Use(fiberlimit.New(lim, core.PerMinute(600), keyfunc.Tenant("X-Tenant-ID")))
	app.Get("/hello", func(c *fiber.Ctx) error {
		return c.SendString(fmt.Sprintf("hello, %s\n", c.Get("X-Tenant-ID")))
	})
	// Searches are expensive: 2 a minute per client. A route key needs the
	// route's own handler chain in fiber, not app.Use.
	perSearch := fiberlimit.New(lim, core.PerMinute(2), keyfunc.Join(keyfunc.IP(), keyfunc.Route()))
	app.Get("/search", perSearch, func(c *fiber.Ctx) error {
		return c.SendString(fmt.Sprintf("results for %q\n", c.Query("q")))
	})

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, tryIt, fmt.Sprintf("http://localhost:%d", ln.Addr().(*net.TCPAddr).Port))
	errc := make(chan error, 1)
	go func() { errc <- app.Listener(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return app.ShutdownWithContext(shutdown)
}

const tryIt = `listening on %[1]s; try:
  curl -i -H 'X-Tenant-ID: acme' %[1]s/hello           # 200
  curl -i %[1]s/hello                                  # 400: no tenant
  curl -i -H 'X-Tenant-ID: acme' '%[1]s/search?q=go'   # 200
  curl -i -H 'X-Tenant-ID: acme' '%[1]s/search?q=go'   # 200
  curl -i -H 'X-Tenant-ID: acme' '%[1]s/search?q=go'   # 429: 2 searches a minute
`
