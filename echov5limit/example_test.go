package echov5limit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/labstack/echo/v5"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/echov5limit"
	"github.com/sluicehq/sluice/keyfunc"
)

func Example() {
	lim, err := core.NewMemory() // core.New(rdb) to share the limit across replicas
	if err != nil {
		panic(err)
	}
	e := echo.New()
	// Two requests per minute for each client address. A denial is an
	// *echo.HTTPError with status 429, which the app's HTTPErrorHandler
	// answers (echo's default one writes JSON).
	e.Use(echov5limit.New(lim, core.PerMinute(2), keyfunc.IP()))
	e.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hello") })

	for range 3 {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.RemoteAddr = "203.0.113.7:51234"
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"), strings.TrimSpace(rec.Body.String()))
	}
	// Output:
	// 200 1 hello
	// 200 0 hello
	// 429 0 {"message":"Too Many Requests"}
}
