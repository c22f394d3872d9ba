package httplimit

import (
	"net/http"

	"github.com/sluicehq/sluice/policy"
)

// serveSettled passes a request whose verdict settles by its response on
// to next, and settles it: as the status is written when the status is
// all the settlement needs (the header fields then describe the bucket
// after it), else once next returns.
// v is taken by value, so that only a settling request's verdict moves to
// the heap.
func serveSettled(w http.ResponseWriter, r *http.Request, next http.Handler, verdict policy.Verdict) {
	v := &verdict
	if !v.AtStatus() {
		r = r.WithContext(v.Context(r.Context())) // for SetCost
	}
	sw := &settleWriter{ResponseWriter: w, v: v, r: r}
	ok := false
	defer func() {
		status := sw.status
		switch {
		case !ok:
			status = http.StatusInternalServerError
		case status == 0:
			status = http.StatusOK
		}
		if v.Settle(request{r}, policy.Response{Status: status, Header: w.Header()}) && !sw.sent {
			v.WriteHeaders(w.Header())
		}
		v.Done()
	}()
	next.ServeHTTP(sw, r)
	ok = true
}

// settleWriter records the status a handler writes and, for a verdict
// settled by its status alone, settles it before the header goes out.
type settleWriter struct {
	http.ResponseWriter
	v      *policy.Verdict
	r      *http.Request
	status int
	sent   bool
}

func (sw *settleWriter) WriteHeader(code int) {
	if !sw.sent && code >= 200 {
		sw.sent, sw.status = true, code
		h := sw.ResponseWriter.Header()
		if sw.v.AtStatus() && sw.v.Settle(request{sw.r}, policy.Response{Status: code, Header: h}) {
			sw.v.WriteHeaders(h)
		}
	}
	sw.ResponseWriter.WriteHeader(code)
}

func (sw *settleWriter) Write(b []byte) (int, error) {
	if !sw.sent {
		sw.WriteHeader(http.StatusOK)
	}
	return sw.ResponseWriter.Write(b)
}

// Flush sends what was written so far, when the writer underneath can:
// streaming handlers find the http.Flusher they expect.
func (sw *settleWriter) Flush() {
	if !sw.sent {
		sw.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(sw.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the writer underneath.
func (sw *settleWriter) Unwrap() http.ResponseWriter { return sw.ResponseWriter }
