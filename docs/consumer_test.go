package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// consumer writes a module that takes sluice's modules from this tree and holds
// main.go, runs go mod tidy and go build in it, and returns its go.mod and
// go.sum. It is what a user's module meets.
func consumer(t *testing.T, main string) (gomod, gosum string) {
	t.Helper()
	dir := t.TempDir()
	// go-redis at the version sluice requires, so that the run does not
	// depend on what the proxy's latest is.
	root, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goredis := regexp.MustCompile(`(?m)^(?:require)?\s*(github\.com/redis/go-redis/v9 v\S+)`).FindSubmatch(root)
	if goredis == nil {
		t.Fatal("../go.mod does not require go-redis")
	}
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(root) // the Go sluice needs
	mod := "module example.com/consumer\n\n" + string(goLine) + "\n\nrequire " + string(goredis[1]) + "\n\n" + localReplaces(t)
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

// sumModules returns the module paths of a go.sum.
func sumModules(gosum string) map[string]bool {
	mods := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(gosum), "\n") {
		if m, _, ok := strings.Cut(line, " "); ok {
			mods[m] = true
		}
	}
	return mods
}

// TestConsumerModule: a program that imports core and httplimit, on a
// default go-redis client, builds, and its module meets none of the
// frameworks sluice adapts nor anything only sluice's tests need. go mod
// tidy keeps checksums for the imports of the tests of every package a
// program imports, so this also holds core's, keyfunc's, policy's and
// httplimit's tests (and the test kits they use) to the standard library
// and go-redis: the consumer's go.sum holds sluice's modules and go-redis's
// (go-redis and what it requires), nothing else.
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
	for _, unwanted := range []string{
		"gin-gonic/gin", "labstack/echo", "gofiber/fiber", "valyala/fasthttp", "prometheus/client_golang",
		"google.golang.org/grpc", "go.opentelemetry.io", "go-chi/chi",
		"alicebob/miniredis", "yuin/gopher-lua", "go.uber.org/goleak", "go.yaml.in/yaml/v2", "pelletier/go-toml",
	} {
		if strings.Contains(gomod, unwanted) {
			t.Errorf("a program importing core and httplimit requires %s:\n%s", unwanted, gomod)
		}
		if strings.Contains(gosum, unwanted) {
			t.Errorf("a program importing core and httplimit has %s in its go.sum:\n%s", unwanted, gosum)
		}
	}
	// Beyond sluice's own modules, go.sum holds go-redis's alone: the
	// modules in the go.sum of a program that imports go-redis and nothing
	// else.
	_, redisSum := consumer(t, `package main

import "github.com/redis/go-redis/v9"

func main() { _ = redis.NewClient(&redis.Options{}) }
`)
	goredis := sumModules(redisSum)
	if !goredis["github.com/redis/go-redis/v9"] {
		t.Fatalf("a program importing go-redis alone has a go.sum without it:\n%s", redisSum)
	}
	for m := range sumModules(gosum) {
		if !goredis[m] && m != "github.com/sluicehq/sluice" && !strings.HasPrefix(m, "github.com/sluicehq/sluice/") {
			t.Errorf("a program importing core and httplimit has %s in its go.sum, which a program importing go-redis alone has not", m)
		}
	}
	t.Logf("go.mod:\n%s\ngo.sum:\n%s", gomod, gosum)
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
