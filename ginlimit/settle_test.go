package ginlimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/sluicehq/sluice/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestSettleHeaders: the rate-limit fields describe the bucket after the
// settlement when it happens before the header is sent (a status-only
// settlement as a handler flushes, or a final cost when the chain sent
// nothing), and the reservation otherwise (a final cost is settled once
// the chain returns), when the refund still happens;
// c.Writer is the engine's own again once the middleware returns.
func TestSettleHeaders(t *testing.T) {
	lim := adaptertest.Frozen(t)
	r := gin.New()
	r.Use(func(c *gin.Context) {
		w := c.Writer
		c.Next()
		if c.Writer != w {
			t.Errorf("%s: c.Writer is %T after the middleware, want the engine's own", c.Request.URL.Path, c.Writer)
		}
	})
	refund := func(c *gin.Context) {
		if !SetCost(c.Request.Context(), 0) {
			t.Error("SetCost found no middleware")
		}
	}
	final := New(lim, core.PerMinute(2), keyfunc.Static("final"), WithFinalCost(nil))
	r.GET("/sent", final, func(c *gin.Context) { refund(c); c.String(http.StatusOK, "ok") })
	r.GET("/unsent", final, refund)
	r.GET("/late", final, func(c *gin.Context) { c.String(http.StatusOK, "ok"); refund(c) })
	r.GET("/stream", New(lim, core.PerMinute(2), keyfunc.Static("stream"), WithChargeIf(func(s int) bool { return s >= 400 })),
		func(c *gin.Context) {
			c.Status(http.StatusAccepted)
			c.Writer.Flush()
			if got := c.Writer.Header().Get("X-RateLimit-Remaining"); got != "2" {
				t.Errorf("/stream: X-RateLimit-Remaining = %q as the header is flushed, want the refund's 2", got)
			}
		})
	for i, tc := range []struct {
		path      string
		remaining string
	}{
		{"/sent", "1"},   // sent before the settlement: the reservation's fields
		{"/late", "1"},   // ... and the refund happened
		{"/unsent", "2"}, // nothing sent: the fields after the refund
		{"/stream", "2"},
		{"/stream", "2"},
	} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if got := w.Header().Get("X-RateLimit-Remaining"); w.Code >= 300 || got != tc.remaining {
			t.Errorf("request %d, %s: %d with X-RateLimit-Remaining %q, want 2xx with %q", i+1, tc.path, w.Code, got, tc.remaining)
		}
	}
}
