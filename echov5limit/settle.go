package echov5limit

import (
	"net/http"

	"github.com/labstack/echo/v5"
	"github.com/sluicehq/sluice/policy"
)

// serveSettled passes a request whose verdict settles by its response on
// to next, and settles it: in a Response.Before hook, as the status is
// written, when the status is all the settlement needs (the header fields
// then describe the bucket after it), else once next returns, rewriting
// the fields if the response is not committed yet. A panic settles as
// status 500.
//
// The response writer must unwrap to the *echo.Response (see
// echo.UnwrapResponse), as echo asks of every writer an app installs:
// otherwise the middleware settles once next returns and leaves the fields
// as they were, not knowing whether they were sent.
//
// v is taken by value, so that only a settling request's verdict moves to
// the heap.
func serveSettled(c *echo.Context, next echo.HandlerFunc, verdict policy.Verdict) (err error) {
	v := &verdict
	if !v.AtStatus() {
		// WithFinalCost: the handlers get the context SetCost looks in.
		r := c.Request()
		c.SetRequest(r.WithContext(v.Context(r.Context())))
	}
	rw := c.Response()
	resp, _ := echo.UnwrapResponse(rw)
	if resp != nil && v.AtStatus() {
		// Runs in WriteHeader, after Status is set, before the header
		// goes out; Settle does nothing once the request is settled.
		resp.Before(func() {
			if v.Settle(request{c}, policy.Response{Status: resp.Status, Header: resp.Header()}) {
				v.WriteHeaders(resp.Header())
			}
		})
	}
	ok := false
	defer func() {
		// The status written, or the one the app's HTTPErrorHandler
		// answers err with by default (echo.StatusCode, or 500).
		_, status := echo.ResolveResponseStatus(rw, err)
		if !ok {
			status = http.StatusInternalServerError
		}
		if v.Settle(request{c}, policy.Response{Status: status, Header: rw.Header()}) && resp != nil && !resp.Committed {
			v.WriteHeaders(rw.Header())
		}
		v.Done()
	}()
	err = next(c)
	ok = true
	return err
}
