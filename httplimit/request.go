package httplimit

import (
	"net/http"
	"strings"
)

// request is the keyfunc.Request view of an *http.Request. It holds a
// single pointer, so passing it as an interface does not allocate.
type request struct{ r *http.Request }

func (req request) Header(name string) string {
	vals := req.r.Header.Values(name)
	switch len(vals) {
	case 0:
		return ""
	case 1:
		return vals[0]
	}
	return strings.Join(vals, ", ")
}

func (req request) RemoteAddr() string { return req.r.RemoteAddr }
func (req request) Method() string     { return req.r.Method }
func (req request) Route() string      { return req.r.Pattern }
func (req request) Value(key any) any  { return req.r.Context().Value(key) }

// Native is the *http.Request behind the view (see [Key]).
func (req request) Native() *http.Request { return req.r }

// Path is the request's URL path, which names the middleware in a log line
// when the router reports no route pattern.
func (req request) Path() string { return req.r.URL.Path }
