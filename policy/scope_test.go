package policy

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestScope: middlewares made at different lines keep apart buckets even
// with the same limit and key function; middlewares made at one line, or
// given one WithScope, share them; the second middleware at one line is
// warned about once; an empty WithScope is refused.
func TestScope(t *testing.T) {
	var logs bytes.Buffer
	lim, err := core.NewMemory(core.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	limit, key := core.PerMinute(1), keyfunc.Static("all")
	mustNew := func(p *Policy, _ struct{}, err error) *Policy {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	allowed := func(p *Policy) bool {
		return p.Decide(context.Background(), fakeReq{}).Action == Continue
	}

	a := mustNew(New[req, struct{}](lim, limit, key, self))
	b := mustNew(New[req, struct{}](lim, limit, key, self))
	if !allowed(a) || !allowed(b) {
		t.Error("middlewares made at two lines share a bucket")
	}

	var looped []*Policy
	for range 3 {
		looped = append(looped, mustNew(New[req, struct{}](lim, limit, key, self)))
	}
	if !allowed(looped[0]) || allowed(looped[1]) {
		t.Error("middlewares made at one line do not share their bucket")
	}
	if n := strings.Count(logs.String(), "a second middleware is made at one line"); n != 1 {
		t.Errorf("warned %d times about middlewares made at one line, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "policy.TestScope:") {
		t.Errorf("the warning does not name the line:\n%s", logs.String())
	}

	x := mustNew(New[req, struct{}](lim, limit, key, self, WithScope[req, struct{}]("shared")))
	y := mustNew(New[req, struct{}](lim, limit, key, self, WithScope[req, struct{}]("shared")))
	z := mustNew(New[req, struct{}](lim, limit, key, self, WithScope[req, struct{}]("other")))
	if !allowed(x) || allowed(y) || !allowed(z) {
		t.Error("WithScope does not share buckets by name")
	}

	if _, _, err := New(lim, limit, key, self, WithScope[req, struct{}]("")); err == nil || !strings.Contains(err.Error(), "WithScope: empty scope") {
		t.Errorf("an empty WithScope: %v, want an error naming it", err)
	}
}

func TestIsConstructor(t *testing.T) {
	for fn, want := range map[string]bool{
		"github.com/sluicehq/sluice/policy.New[...]":        true,
		"github.com/sluicehq/sluice/ginlimit.New":           true,
		"github.com/sluicehq/sluice/httplimit.Build":        true,
		"github.com/sluicehq/sluice/ginlimit.TestDefault":   false,
		"github.com/sluicehq/sluice/ginlimit.middleware":    false,
		"github.com/sluicehq/sluice/examples/gin.main":      false,
		"github.com/sluicehq/sluice/examples/ginlimit.New":  false,
		"github.com/sluicehq/sluice/policy.TestScope.func1": false,
		"main.routes": false,
		"github.com/sluicehq/sluicex/ginlimit.New": false,
	} {
		if got := isConstructor(fn); got != want {
			t.Errorf("isConstructor(%q) = %v, want %v", fn, got, want)
		}
	}
}
