package echov5limit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/sluicehq/sluice/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// TestSettleHeaders: the rate-limit fields describe the bucket after the
// settlement when it happens before the response is committed (a
// status-only settlement as the status is written, or a final cost when
// the handler returned an error for the HTTPErrorHandler), and the
// reservation otherwise, when the refund still happens; the final cost
// sees the status the error handler answers an error with.
func TestSettleHeaders(t *testing.T) {
	lim := adaptertest.Frozen(t)
	e := echo.New()
	var seen int
	final := New(lim, core.PerMinute(2), keyfunc.Static("final"), WithFinalCost(func(c *echo.Context, resp policy.Response) int {
		seen = resp.Status
		if n, ok := resp.Cost(); ok {
			return n
		}
		return resp.Reserved
	}))
	refund := func(c *echo.Context) {
		if !SetCost(c.Request().Context(), 0) {
			t.Error("SetCost found no middleware")
		}
	}
	e.GET("/sent", func(c *echo.Context) error { refund(c); return c.String(http.StatusOK, "ok") }, final)
	e.GET("/error", func(c *echo.Context) error { refund(c); return &echo.HTTPError{Code: http.StatusTeapot} }, final)
	e.GET("/stream", func(c *echo.Context) error {
		c.Response().WriteHeader(http.StatusAccepted)
		_ = http.NewResponseController(c.Response()).Flush()
		if got := c.Response().Header().Get("X-RateLimit-Remaining"); got != "2" {
			t.Errorf("/stream: X-RateLimit-Remaining = %q as the header is written, want the refund's 2", got)
		}
		return nil
	}, New(lim, core.PerMinute(2), keyfunc.Static("stream"), WithChargeIf(func(s int) bool { return s >= 400 })))
	for i, tc := range []struct {
		path      string
		status    int
		remaining string
	}{
		{"/sent", 200, "1"},  // committed before the settlement: the reservation's fields
		{"/sent", 200, "1"},  // ... and the refund happened
		{"/error", 418, "2"}, // not committed: the fields after the refund
		{"/stream", 202, "2"},
		{"/stream", 202, "2"},
	} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if got := w.Header().Get("X-RateLimit-Remaining"); w.Code != tc.status || got != tc.remaining {
			t.Errorf("request %d, %s: %d with X-RateLimit-Remaining %q, want %d with %q", i+1, tc.path, w.Code, got, tc.status, tc.remaining)
		}
		if tc.path != "/stream" && seen != tc.status {
			t.Errorf("request %d, %s: the final cost saw status %d, want %d", i+1, tc.path, seen, tc.status)
		}
	}
}
