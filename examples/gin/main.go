// Command gin serves a small API on gin with three sluice limits: 100
// requests a minute per client address, 600 per tenant, and 2 searches a
// minute per client. It uses an embedded miniredis unless REDIS_ADDR is set.
//
//	go run ./examples/gin [-addr :8080]
package main

import (
	"context"
	"github.com/redis/go-redis/v9"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/gin-gonic/gin"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoserve"
	"github.com/sluicehq/sluice/ginlimit"
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
	return demoserve.Run(ctx, "gin", args, stdout, demoserve.FrameworkTry, func(redisAddr string) (demoserve.Server, io.Closer, error) {
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
		gin.SetMode(gin.ReleaseMode)
		r := gin.New()
		// Every request, one budget across the routes (a middleware's default; WithPerRoute(true) would count each route apart): 100 a minute per client address, then 600 a minute per
		// tenant. Clients write X-Tenant-ID themselves: trust it only behind a
		// gateway that sets it, or key by keyfunc.TenantValue (examples/tenants).
		r.Use(ginlimit.New(lim, core.PerMinute(100), keyfunc.IP()))
		r.Use(ginlimit.New(lim, core.PerMinute(600), keyfunc.Tenant("X-Tenant-ID")))
		r.GET("/hello", func(c *gin.Context) {
			c.String(http.StatusOK, "hello, %s\n", c.GetHeader("X-Tenant-ID"))
		})
		// Searches are expensive: 2 a minute per client, on this route only.
		perSearch := ginlimit.New(lim, core.PerMinute(2), keyfunc.Join(keyfunc.IP(), keyfunc.Route()))
		r.GET("/search", perSearch, func(c *gin.Context) {
			c.String(http.StatusOK, "results for %q\n", c.Query("q"))
		})
		return demoserve.HTTP(r), rdb, nil
	})
}
