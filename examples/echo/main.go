// Command echo serves a small API on echo v4 with three sluice limits: 100
// requests a minute per client address, 600 per tenant, and 2 searches a
// minute per client. It uses an embedded miniredis unless REDIS_ADDR is set.
//
//	go run ./examples/echo [-addr :8080]
package main

import (
	"context"
	"fmt"
	"github.com/redis/go-redis/v9"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/labstack/echo/v4"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/examples/internal/demoserve"
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
	return demoserve.Run(ctx, "echo", args, stdout, demoserve.FrameworkTry, func(redisAddr string) (demoserve.Server, io.Closer, error) {
		// Your go-redis client, and one engine for every middleware.
		// core.New takes any client; these two options let the limiter's
		// 50 ms budget reach the socket (and batch concurrent decisions)
		// and keep a lost reply from charging its bucket twice.
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
		lim, err := core.New(rdb)
		if err != nil {
			return nil, rdb, err
		}
		// Ready, as a readiness probe calls it: the scripts are loaded and
		// connections open before the first request spends its budget.
		if err := lim.Ready(ctx); err != nil {
			return nil, rdb, err
		}
		e := echo.New()
		e.HideBanner, e.HidePort = true, true
		// Every request, one budget across the routes (a middleware's default; WithPerRoute(true) would count each route apart): 100 a minute per client address, then 600 a minute per
		// tenant. Clients write X-Tenant-ID themselves: trust it only behind a
		// gateway that sets it, or key by keyfunc.TenantValue (examples/tenants).
		e.Use(echolimit.New(lim, core.PerMinute(100), keyfunc.IP()))
		e.Use(echolimit.New(lim, core.PerMinute(600), keyfunc.Tenant("X-Tenant-ID")))
		e.GET("/hello", func(c echo.Context) error {
			return c.String(http.StatusOK, fmt.Sprintf("hello, %s\n", c.Request().Header.Get("X-Tenant-ID")))
		})
		// Searches are expensive: 2 a minute per client, on this route only.
		perSearch := echolimit.New(lim, core.PerMinute(2), keyfunc.Join(keyfunc.IP(), keyfunc.Route()))
		e.GET("/search", func(c echo.Context) error {
			return c.String(http.StatusOK, fmt.Sprintf("results for %q\n", c.QueryParam("q")))
		}, perSearch)
		return demoserve.HTTP(e), rdb, nil
	})
}
