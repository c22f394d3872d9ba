// Command login throttles password guessing on net/http: 3 failed logins a
// minute per user, across every replica sharing the Redis, while
// successful logins are never counted. The middleware reserves a token
// before the handler checks the password and gives it back, atomically in
// Redis, when the answer is not a 401 (httplimit.WithChargeIf). It uses an
// embedded miniredis unless REDIS_ADDR is set.
//
//	go run ./examples/login [-addr :8080]
package main

import (
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demoserve"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
)

// The curl lines send alice's password (hunter2) and a wrong one
// (alice:wrong), base64-encoded as HTTP Basic authentication wants.
const try = `listening on %[1]s; try:
  curl -i -X POST -H 'Authorization: Basic YWxpY2U6aHVudGVyMg==' %[1]s/login   # 200: not counted
  curl -i -X POST -H 'Authorization: Basic YWxpY2U6aHVudGVyMg==' %[1]s/login   # 200: not counted
  curl -i -X POST -H 'Authorization: Basic YWxpY2U6aHVudGVyMg==' %[1]s/login   # 200: not counted
  curl -i -X POST -H 'Authorization: Basic YWxpY2U6aHVudGVyMg==' %[1]s/login   # 200: not counted
  curl -i -X POST -H 'Authorization: Basic YWxpY2U6d3Jvbmc=' %[1]s/login       # 401: 1st failure
  curl -i -X POST -H 'Authorization: Basic YWxpY2U6d3Jvbmc=' %[1]s/login       # 401: 2nd failure
  curl -i -X POST -H 'Authorization: Basic YWxpY2U6d3Jvbmc=' %[1]s/login       # 401: 3rd failure
  curl -i -X POST -H 'Authorization: Basic YWxpY2U6aHVudGVyMg==' %[1]s/login   # 429: alice is locked out for now
  curl -i -X POST %[1]s/login                                                 # 400: no user
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	return demoserve.Run(ctx, "login", args, stdout, try, func(redisAddr string) (demoserve.Server, io.Closer, error) {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
		// A second's budget, not the default 50 ms: the settlement that
		// refunds a request must not be lost to a busy machine, where
		// the embedded Redis shares this process's CPU (a settlement
		// that fails keeps the charge, which errs toward denying).
		lim, err := core.New(rdb, core.WithTimeout(time.Second))
		if err != nil {
			return nil, rdb, err
		}
		// Ready, as a readiness probe calls it: the scripts are loaded and
		// connections open before the first request spends its budget.
		if err := lim.Ready(ctx); err != nil {
			return nil, rdb, err
		}
		// 3 failed logins a minute per user; a 200 gives its token back
		// before the answer's header fields are written, so they show
		// the failures left.
		failures := httplimit.New(lim, core.PerMinute(3).WithName("login-failures"), byUser,
			httplimit.WithChargeIf(func(status int) bool { return status == http.StatusUnauthorized }),
			httplimit.WithScope("login"),
		)
		mux := http.NewServeMux()
		mux.Handle("POST /login", failures(http.HandlerFunc(login)))
		return demoserve.HTTP(mux), rdb, nil
	})
}

// byUser keys a login by the user it names; a request naming none gets
// 400.
var byUser = httplimit.Key(func(r *http.Request) (string, error) {
	user, _, ok := r.BasicAuth()
	if !ok || user == "" {
		return "", fmt.Errorf("no user in the Authorization field: %w", keyfunc.ErrNoKey)
	}
	return "user:" + user, nil
})

// login checks the password: here, alice's is hunter2.
func login(w http.ResponseWriter, r *http.Request) {
	user, pass, _ := r.BasicAuth()
	if user != "alice" || subtle.ConstantTimeCompare([]byte(pass), []byte("hunter2")) != 1 {
		w.Header().Set("WWW-Authenticate", `Basic realm="sluice demo"`)
		http.Error(w, "wrong user or password", http.StatusUnauthorized)
		return
	}
	fmt.Fprintf(w, "welcome, %s\n", user)
}
