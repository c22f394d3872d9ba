package ginlimit

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/sluicehq/sluice/policy"
)

// serveSettled runs the rest of the chain for a request whose verdict
// settles by its response, and settles it: as the header is sent when the
// status is all the settlement needs (the header fields then describe the
// bucket after it), else once the chain returns, rewriting the fields if
// nothing was sent yet. A panic settles as status 500.
// v is taken by value, so that only a settling request's verdict moves to
// the heap.
func serveSettled(c *gin.Context, verdict policy.Verdict) {
	v := &verdict
	if !v.AtStatus() {
		// WithFinalCost: the handlers get the context SetCost looks in.
		c.Request = c.Request.WithContext(v.Context(c.Request.Context()))
	}
	w := c.Writer
	if v.AtStatus() {
		c.Writer = &settleWriter{ResponseWriter: w, v: v, c: c}
	}
	ok := false
	defer func() {
		c.Writer = w
		status := w.Status()
		if !ok {
			status = http.StatusInternalServerError
		}
		if v.Settle(request{c}, policy.Response{Status: status, Header: w.Header()}) && !w.Written() {
			v.WriteHeaders(w.Header())
		}
		v.Done()
	}()
	c.Next()
	ok = true
}

// settleWriter settles a verdict by its status alone just before gin sends
// the header: gin's WriteHeader only records the status, which goes out
// with WriteHeaderNow, the first Write or WriteString, or Flush.
type settleWriter struct {
	gin.ResponseWriter
	v *policy.Verdict
	c *gin.Context
}

// settle settles the verdict by the status recorded so far, when the
// header has not been sent yet, and rewrites the fields it moved.
func (sw *settleWriter) settle() {
	if sw.ResponseWriter.Written() {
		return
	}
	h := sw.ResponseWriter.Header()
	if sw.v.Settle(request{sw.c}, policy.Response{Status: sw.ResponseWriter.Status(), Header: h}) {
		sw.v.WriteHeaders(h)
	}
}

func (sw *settleWriter) WriteHeaderNow() {
	sw.settle()
	sw.ResponseWriter.WriteHeaderNow()
}

func (sw *settleWriter) Write(b []byte) (int, error) {
	sw.settle()
	return sw.ResponseWriter.Write(b)
}

func (sw *settleWriter) WriteString(s string) (int, error) {
	sw.settle()
	return sw.ResponseWriter.WriteString(s)
}

func (sw *settleWriter) Flush() {
	sw.settle()
	sw.ResponseWriter.Flush()
}

// Unwrap gives http.ResponseController the writer underneath.
func (sw *settleWriter) Unwrap() http.ResponseWriter { return sw.ResponseWriter }
