package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/keyfunc"
)

// Keep gin's debug route listing out of the examples' output.
func init() { gin.SetMode(gin.TestMode) }

func Example() {
	lim, err := core.NewMemory() // core.New(rdb) to share the limit across replicas
	if err != nil {
		panic(err)
	}
	r := gin.New()
	// Two requests per minute for each client address, across every route
	// of r: a middleware is one budget per key across the routes it guards.
	// gin does not tell a middleware whether r.Use or a route mounted it,
	// so to give each route a budget of its own, say so:
	// ginlimit.WithPerRoute(true).
	r.Use(ginlimit.New(lim, core.PerMinute(2), keyfunc.IP()))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })

	for range 3 {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.RemoteAddr = "203.0.113.7:51234"
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"), strings.TrimSpace(rec.Body.String()))
	}
	// Output:
	// 200 1 hello
	// 200 0 hello
	// 429 0 Too Many Requests
}

// A middleware registered with r.Use is one budget per key across the
// routes; WithPerRoute(true) counts each route apart.
func ExampleWithPerRoute() {
	lim, err := core.NewMemory()
	if err != nil {
		panic(err)
	}
	r := gin.New()
	// One request per minute per client address on each route.
	r.Use(ginlimit.New(lim, core.PerMinute(1), keyfunc.IP(), ginlimit.WithPerRoute(true)))
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	r.GET("/orders", ok)
	r.GET("/invoices", ok)

	for _, path := range []string{"/orders", "/invoices", "/orders"} {
		req := httptest.NewRequest("GET", path, nil)
		req.RemoteAddr = "203.0.113.7:51234"
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Println(path, rec.Code)
	}
	// Output:
	// /orders 200
	// /invoices 200
	// /orders 429
}

// Two middlewares with the same limits and no scope are one budget; a
// scope each keeps them apart.
func ExampleWithScope() {
	lim, err := core.NewMemory()
	if err != nil {
		panic(err)
	}
	r := gin.New()
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	r.GET("/orders", ginlimit.New(lim, core.PerMinute(1), keyfunc.IP(), ginlimit.WithScope("orders")), ok)
	r.GET("/invoices", ginlimit.New(lim, core.PerMinute(1), keyfunc.IP(), ginlimit.WithScope("invoices")), ok)

	for _, path := range []string{"/orders", "/invoices", "/orders"} {
		req := httptest.NewRequest("GET", path, nil)
		req.RemoteAddr = "203.0.113.7:51234"
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Println(path, rec.Code)
	}
	// Output:
	// /orders 200
	// /invoices 200
	// /orders 429
}

// A penalty on the login route only: its third attempt within a minute
// locks the address out for 15 minutes, while the search route, on the
// same engine, only waits for its next token.
func ExampleWithPenalty() {
	lim, err := core.NewMemory()
	if err != nil {
		panic(err)
	}
	r := gin.New()
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	r.POST("/login", ginlimit.New(lim, core.PerMinute(2), keyfunc.IP(), ginlimit.WithPenalty(15*time.Minute), ginlimit.WithScope("login")), ok)
	r.GET("/search", ginlimit.New(lim, core.PerMinute(2), keyfunc.IP(), ginlimit.WithScope("search")), ok)

	for _, route := range []string{"POST /login", "POST /login", "POST /login", "GET /search", "GET /search", "GET /search"} {
		method, path, _ := strings.Cut(route, " ")
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = "203.0.113.7:51234"
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Println(strings.TrimSpace(fmt.Sprint(route, " ", rec.Code, " ", rec.Header().Get("Retry-After"))))
	}
	// Output:
	// POST /login 200
	// POST /login 200
	// POST /login 429 900
	// GET /search 200
	// GET /search 200
	// GET /search 429 30
}
