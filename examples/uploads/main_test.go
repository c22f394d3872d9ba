package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/examples/internal/smoketest"
)

// wait bounds every wait of the test.
const wait = 10 * time.Second

func TestRun(t *testing.T) {
	out := smoketest.Start(t, run, "-addr", "127.0.0.1:0")
	smoketest.Curl(t, out.String())
	base := smoketest.Base(t, out.String())

	// Two slow uploads of one tenant hold its two slots while their bodies
	// stream in; a third is refused, another tenant's is not; once one
	// ends, its slot is free again.
	first, second := startUpload(t, base, "acme"), startUpload(t, base, "acme")
	client := smoketest.Client()
	code, h, err := smoketest.Do(client, "POST", base+"/upload", http.Header{"X-Tenant-Id": {"acme"}})
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusTooManyRequests || h.Get("Retry-After") != "1" || h.Get("RateLimit") != `"uploads";r=0` {
		t.Errorf("a third upload: %d, Retry-After %q, RateLimit %q; want 429, 1 and \"uploads\";r=0", code, h.Get("Retry-After"), h.Get("RateLimit"))
	}
	if want := `"uploads/min";q=60;w=60, "uploads";q=2;qu="concurrent-requests"`; h.Get("RateLimit-Policy") != want {
		t.Errorf("RateLimit-Policy %q, want %q", h.Get("RateLimit-Policy"), want)
	}
	if code, _, err := smoketest.Do(client, "POST", base+"/upload", http.Header{"X-Tenant-Id": {"globex"}}); err != nil || code != http.StatusOK {
		t.Errorf("another tenant's upload: %d, %v; want 200", code, err)
	}
	if body := first.finish(t); !strings.HasPrefix(body, "stored 5 bytes for acme") {
		t.Errorf("the first upload's answer %q, want it stored", body)
	}
	if code, _, err := smoketest.Do(client, "POST", base+"/upload", http.Header{"X-Tenant-Id": {"acme"}}); err != nil || code != http.StatusOK {
		t.Errorf("an upload after the first ended: %d, %v; want 200", code, err)
	}
	second.finish(t)
}

// slowUpload is an upload whose body the test streams.
type slowUpload struct {
	body *io.PipeWriter
	done chan answer
}

type answer struct {
	code int
	body string
	err  error
}

// startUpload starts an upload for tenant and returns once the handler is
// reading its body, and so holds its slot: the request asks to be told to
// go on (Expect: 100-continue), which the server does when the handler
// first reads the body, and only then does the client send the first
// bytes, which the pipe hands over only to a reader.
func startUpload(t *testing.T, base, tenant string) *slowUpload {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { _ = pw.Close() })
	req, err := http.NewRequest("POST", base+"/upload", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tenant-ID", tenant)
	req.Header.Set("Expect", "100-continue")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, ExpectContinueTimeout: wait}}
	u := &slowUpload{body: pw, done: make(chan answer, 1)}
	go func() {
		res, err := client.Do(req)
		if err != nil {
			u.done <- answer{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		u.done <- answer{res.StatusCode, string(b), err}
	}()
	sent := make(chan error, 1)
	go func() {
		_, err := pw.Write([]byte("hello"))
		sent <- err
	}()
	select {
	case err := <-sent:
		if err != nil {
			t.Fatalf("upload for %s: %v", tenant, err)
		}
	case a := <-u.done:
		t.Fatalf("upload for %s: answered %d %q (%v) before reading its body", tenant, a.code, a.body, a.err)
	case <-time.After(wait):
		t.Fatalf("upload for %s: its body not read within %v", tenant, wait)
	}
	return u
}

// finish ends the upload's body and returns its answer's body, which must
// come with 200.
func (u *slowUpload) finish(t *testing.T) string {
	t.Helper()
	_ = u.body.Close()
	select {
	case a := <-u.done:
		if a.err != nil || a.code != http.StatusOK {
			t.Errorf("upload: %d %q, %v; want 200", a.code, a.body, a.err)
		}
		return a.body
	case <-time.After(wait):
		t.Fatalf("upload: no answer within %v of its end", wait)
	}
	return ""
}
