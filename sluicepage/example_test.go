package sluicepage_test

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/sluicepage"
)

// The page is mounted as net/http/pprof is, behind the program's own
// authentication: the page itself lets in whoever reaches it. Its script
// polls the same address with ?format=json; here a client reads that JSON.
func Example() {
	lim, err := core.NewMemory() // core.New(rdb) in production
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	plans, err := overrides.New(lim, "plans")
	if err != nil {
		panic(err)
	}
	defer plans.Close()
	if err := plans.Set(context.Background(), "tenant:acme", overrides.Override{Deny: true}); err != nil {
		panic(err)
	}

	api := core.PerMinute(600)
	src, err := sluicepage.ForLimiter(lim,
		sluicepage.ShowLimits("api", api),
		sluicepage.ShowOverrides(plans))
	if err != nil {
		panic(err)
	}
	page, err := sluicepage.New(src)
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/sluice", operatorsOnly(page))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, token := range []string{"", "s3cret"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/debug/sluice?format=json", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		var data struct {
			Health struct {
				Data struct{ Ready bool } `json:"data"`
			} `json:"health"`
			Limits struct {
				Data []struct {
					Name   string   `json:"name"`
					Limits []string `json:"limits"`
				} `json:"data"`
			} `json:"limits"`
			Top struct {
				Status string `json:"status"`
			} `json:"top"`
			Overrides struct {
				Data []sluicepage.OverrideSet `json:"data"`
			} `json:"overrides"`
		}
		err = json.NewDecoder(resp.Body).Decode(&data)
		resp.Body.Close()
		fmt.Printf("token %q: %s\n", token, resp.Status)
		if err != nil {
			continue
		}
		fmt.Println("store ready:", data.Health.Data.Ready)
		for _, l := range data.Limits.Data {
			fmt.Println("limit", l.Name+":", l.Limits)
		}
		fmt.Println("top talkers:", data.Top.Status)
		for _, s := range data.Overrides.Data {
			fmt.Println("overrides", s.Name+":", s.Entries)
		}
	}
	// Output:
	// token "": 401 Unauthorized
	// token "s3cret": 200 OK
	// store ready: true
	// limit api: [600/m]
	// top talkers: not_enabled
	// overrides plans: [{tenant:acme deny}]
}

// A limiter that keeps top talkers and warns at 80% of a limit: the
// source reads the top talkers of every limit it counts, and the
// warnings a Warnings recorded on this replica.
func ExampleShowWarnings() {
	warnings := new(sluicepage.Warnings)
	lim, err := core.NewMemory( // core.New(rdb, ...) in production
		core.WithTopTalkers(core.TopTalkers{K: 3, Names: true}),
		core.WithThresholdHandler(warnings.Record))
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	api := core.PerMinute(10).WithName("api")
	rule, err := lim.Prepare(api)
	if err == nil {
		rule, err = rule.WithWarning(0.8)
	}
	if err != nil {
		panic(err)
	}
	for _, key := range []string{"tenant:acme", "tenant:acme", "tenant:globex"} {
		for range 6 {
			if _, err := rule.Allow(context.Background(), key); err != nil {
				panic(err)
			}
		}
	}

	src, err := sluicepage.ForLimiter(lim,
		sluicepage.ShowLimits("api", api),
		sluicepage.ShowWarnings(warnings))
	if err != nil {
		panic(err)
	}
	top, err := src.TopTalkers(context.Background())
	if err != nil {
		panic(err)
	}
	for _, t := range top {
		fmt.Printf("%s: admitted %d, denied %d\n", t.Limit, t.Admitted, t.Denied)
		for _, k := range t.ByAdmitted {
			fmt.Printf("  admitted: %s (%d)\n", k.Key, k.Admitted)
		}
		for _, k := range t.ByDenied {
			fmt.Printf("  most denied: %s (%d)\n", k.Key, k.Denied)
		}
	}
	ws, err := src.Warnings(context.Background())
	if err != nil {
		panic(err)
	}
	for _, w := range ws {
		fmt.Printf("warning: %s crossed %.0f%% of %s, %d left\n", w.Key, 100*w.Threshold, w.Limit, w.Remaining)
	}
	// Output:
	// api: admitted 16, denied 2
	//   admitted: tenant:acme (10)
	//   admitted: tenant:globex (6)
	//   most denied: tenant:acme (2)
	// warning: tenant:acme crossed 80% of api, 2 left
}

// operatorsOnly lets through requests that carry the operators' token:
// the program's own authentication, whatever it is.
func operatorsOnly(next http.Handler) http.Handler {
	const token = "Bearer s3cret" // from a secret store, in a real program
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(token)) != 1 {
			http.Error(w, http.StatusText(http.StatusUnauthorized), http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
