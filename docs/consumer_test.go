package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// consumer writes a module that requires sluice from this tree and holds
// main.go, runs go mod tidy and go build in it, and returns its go.mod and
// go.sum. It is what a user's module meets.
func consumer(t *testing.T, main string) (gomod, gosum string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mod := "module example.com/consumer\n\ngo 1.25.0\n\nrequire github.com/sluicehq/sluice v0.0.0\n\nreplace github.com/sluicehq/sluice => " + root + "\n"
	for name, text := range map[string]string{"go.mod": mod, "main.go": main} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", os.DevNull, "."}} {
		if out, err := goCmd(dir, args...); err != nil {
			t.Fatalf("go %s in a consumer module: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	m, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := os.ReadFile(filepath.Join(dir, "go.sum"))
	return string(m), string(s)
}

// TestConsumerModule: a program that imports core and httplimit, on a
// default go-redis client, builds, and its module meets none of the
// frameworks sluice adapts. What it still meets is logged: core's own
// tests import miniredis and goleak, and go mod tidy keeps checksums for
// the tests of imported packages (issue #16 is open on that).
func TestConsumerModule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy and go build in a scratch module")
	}
	gomod, gosum := consumer(t, `package main

import (
	"net/http"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
)

func main() {
	lim, err := core.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	if err != nil {
		panic(err)
	}
	_ = http.ListenAndServe(":8080", httplimit.New(lim, core.PerMinute(60), keyfunc.IP())(http.NewServeMux()))
}
`)
	for _, heavy := range []string{"gin-gonic/gin", "labstack/echo", "gofiber/fiber", "valyala/fasthttp", "prometheus/client_golang"} {
		if strings.Contains(gomod, heavy) || strings.Contains(gosum, heavy) {
			t.Errorf("a program importing core and httplimit gets %s in its go.mod or go.sum:\n%s", heavy, gomod)
		}
	}
	for _, testOnly := range []string{"alicebob/miniredis", "go.uber.org/goleak"} {
		if strings.Contains(gomod, testOnly) {
			t.Errorf("a program importing core and httplimit requires %s:\n%s", testOnly, gomod)
		}
		if strings.Contains(gosum, testOnly) {
			t.Logf("known: go.sum lists %s, from core's tests", testOnly)
		}
	}
}

// TestFiveLineGin: the README's first program, a limited gin route on a
// default go-redis client, builds in a module of its own.
func TestFiveLineGin(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy and go build in a scratch module")
	}
	consumer(t, `package main

import (
	"log"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/keyfunc"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	lim, err := core.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	r := gin.New()
	r.GET("/search", ginlimit.New(lim, core.PerMinute(60), keyfunc.IP()), func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	log.Fatal(r.Run(":8080"))
}
`)
}
