package fiberv3limit

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/sluicehq/sluice/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// TestSettleHeaders: fiber sends the response after its handlers, so the
// rate-limit fields describe the bucket after the settlement even when a
// handler sent its body before the cost was known; the final cost sees
// the response's header fields, the status the ErrorHandler answers an
// error with (a wrapped *fiber.Error's code), and 500 for a panic.
func TestSettleHeaders(t *testing.T) {
	lim := adaptertest.Frozen(t)
	f := fiber.New()
	var seen int
	final := New(lim, core.PerMinute(2), keyfunc.Static("final"), WithFinalCost(func(_ fiber.Ctx, resp policy.Response) int {
		seen = resp.Status
		if n, err := strconv.Atoi(resp.Header.Get("X-Tokens")); err == nil {
			return n
		}
		if n, ok := resp.Cost(); ok {
			return n
		}
		return resp.Reserved
	}))
	f.Get("/header", final, func(c fiber.Ctx) error {
		if err := c.SendString("ok"); err != nil {
			return err
		}
		c.Set("X-Tokens", "0")
		return nil
	})
	f.Get("/error", final, func(c fiber.Ctx) error {
		if !SetCost(c.Context(), 0) {
			t.Error("SetCost found no middleware")
		}
		return fmt.Errorf("wrapped: %w", fiber.NewError(http.StatusTeapot))
	})
	f.Get("/panic", final, func(fiber.Ctx) error { panic("the handler panics") })
	h := f.Handler()
	for i, tc := range []struct {
		path      string
		status    int
		remaining string
	}{
		{"/header", 200, "2"}, // the body was set before the cost: the fields after the refund
		{"/error", http.StatusTeapot, "2"},
		{"/header", 200, "2"},
	} {
		fctx := newCtx(t, "GET", tc.path, adaptertest.DefaultRemoteAddr, nil)
		h(fctx)
		if got := string(fctx.Response.Header.Peek("X-RateLimit-Remaining")); fctx.Response.StatusCode() != tc.status || got != tc.remaining {
			t.Errorf("request %d, %s: %d with X-RateLimit-Remaining %q, want %d with %q", i+1, tc.path, fctx.Response.StatusCode(), got, tc.status, tc.remaining)
		}
		if seen != tc.status {
			t.Errorf("request %d, %s: the final cost saw status %d, want %d", i+1, tc.path, seen, tc.status)
		}
	}
	func() {
		defer func() {
			if p := recover(); p != "the handler panics" {
				t.Errorf("recovered %v, want the handler's panic", p)
			}
		}()
		h(newCtx(t, "GET", "/panic", adaptertest.DefaultRemoteAddr, nil))
	}()
	if seen != http.StatusInternalServerError {
		t.Errorf("a panic: the final cost saw status %d, want 500", seen)
	}
}
