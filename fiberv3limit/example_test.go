package fiberv3limit_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"

	"github.com/gofiber/fiber/v3"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/fiberv3limit"
	"github.com/sluicehq/sluice/keyfunc"
)

func Example() {
	lim, err := core.NewMemory() // core.New(rdb) to share the limit across replicas
	if err != nil {
		panic(err)
	}
	app := fiber.New()
	// Two requests per minute for each client address. A denial is a
	// *fiber.Error with status 429, which the app's ErrorHandler answers
	// (fiber's default one writes the status text).
	app.Use(fiberv3limit.New(lim, core.PerMinute(2), keyfunc.IP()))
	app.Get("/hello", func(c fiber.Ctx) error { return c.SendString("hello") })

	for range 3 {
		res, err := app.Test(httptest.NewRequest("GET", "/hello", nil))
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(res.Body)
		fmt.Println(res.StatusCode, res.Header.Get("X-RateLimit-Remaining"), strings.TrimSpace(string(body)))
	}
	// Output:
	// 200 1 hello
	// 200 0 hello
	// 429 0 Too Many Requests
}
