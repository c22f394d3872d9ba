package echolimit

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/sluicehq/sluice/policy"
)

// serveSettled passes a request whose verdict settles by its response on
// to next, and settles it: in a Response.Before hook, as the status is
// written, when the status is all the settlement needs (the header fields
// then describe the bucket after it), else once next returns, rewriting
// the fields if the response is not committed yet. A panic settles as
// status 500.
// v is taken by value, so that only a settling request's verdict moves to
// the heap.
func serveSettled(c echo.Context, next echo.HandlerFunc, verdict policy.Verdict) (err error) {
	v := &verdict
	if !v.AtStatus() {
		// WithFinalCost: the handlers get the context SetCost looks in.
		r := c.Request()
		c.SetRequest(r.WithContext(v.Context(r.Context())))
	}
	resp := c.Response()
	if v.AtStatus() {
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
		if v.Settle(request{c}, policy.Response{Status: status(resp, err, ok), Header: resp.Header()}) && !resp.Committed {
			v.WriteHeaders(resp.Header())
		}
		v.Done()
	}()
	err = next(c)
	ok = true
	return err
}

// status is the status of resp once next returned err (ok is false when
// it panicked): the status written, or, when the response is not
// committed and next returned an error, the one the app's HTTPErrorHandler
// answers with by default: an *echo.HTTPError's Code, or 500.
func status(resp *echo.Response, err error, ok bool) int {
	switch {
	case !ok:
		return http.StatusInternalServerError
	case err != nil && !resp.Committed:
		if he := (*echo.HTTPError)(nil); errors.As(err, &he) {
			return he.Code
		}
		return http.StatusInternalServerError
	case resp.Status == 0:
		return http.StatusOK
	}
	return resp.Status
}
