package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

func Example() {
	lim, err := core.NewMemory() // core.New(rdb) to share the limit across replicas
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	// Two requests per minute for each client address.
	handler := httplimit.New(lim, core.PerMinute(2), keyfunc.IP())(mux)

	for range 3 {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.RemoteAddr = "203.0.113.7:51234"
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"), strings.TrimSpace(rec.Body.String()))
	}
	// Output:
	// 200 1 hello
	// 200 0 hello
	// 429 0 Too Many Requests
}

// Login throttling that counts failed attempts only: a 401 keeps its
// token, any other answer gives it back before its header is sent.
func ExampleWithChargeIf() {
	lim, err := core.NewMemory()
	if err != nil {
		panic(err)
	}
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Password") != "hunter2" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "welcome")
	})
	failures := httplimit.New(lim, core.PerMinute(2), keyfunc.IP(),
		httplimit.WithChargeIf(func(status int) bool { return status == http.StatusUnauthorized }))
	handler := failures(login)

	for _, pass := range []string{"hunter2", "hunter2", "hunter2", "guess", "guess", "hunter2"} {
		req := httptest.NewRequest("POST", "/login", nil)
		req.RemoteAddr = "203.0.113.7:51234"
		req.Header.Set("X-Password", pass)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Println(pass, rec.Code, "failures left:", rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// hunter2 200 failures left: 2
	// hunter2 200 failures left: 2
	// hunter2 200 failures left: 2
	// guess 401 failures left: 1
	// guess 401 failures left: 0
	// hunter2 429 failures left: 0
}

// An endpoint charged what its handler used: the handler records the cost
// with SetCost once it knows it.
func ExampleWithFinalCost() {
	lim, err := core.NewMemory()
	if err != nil {
		panic(err)
	}
	export := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rows := len(r.URL.Query().Get("rows")) // the work done, known at the end
		fmt.Fprintf(w, "%d rows\n", rows)
		httplimit.SetCost(r.Context(), rows)
	})
	handler := httplimit.New(lim, core.PerMinute(10), keyfunc.IP(),
		httplimit.WithFinalCost(func(_ *http.Request, resp policy.Response) int {
			n, ok := resp.Cost()
			if !ok {
				return resp.Reserved
			}
			return n
		}))(export)

	for _, rows := range []string{"xxxxxx", "xxxx", "x"} {
		req := httptest.NewRequest("GET", "/export?rows="+rows, nil)
		req.RemoteAddr = "203.0.113.7:51234"
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Println(rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	// Output:
	// 200 6 rows
	// 200 4 rows
	// 429 Too Many Requests
}
