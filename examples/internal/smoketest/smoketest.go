// Package smoketest runs an example's server inside a test and replays the
// curl lines it prints, so that the instructions each example gives are
// checked against its real handler.
//
// It is for the examples' tests only.
package smoketest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RunFunc is an example's entry point: it serves until ctx ends and then
// returns nil after shutting down.
type RunFunc func(ctx context.Context, args []string, stdout io.Writer) error

// wait bounds every wait in this package.
const wait = 10 * time.Second

// Start runs run with args on an embedded miniredis (REDIS_ADDR is cleared
// for the test), waits until it has printed a curl line, and returns its
// output, which grows as run goes on printing. When the test ends, Start
// cancels run's context and checks that run returns nil within a few
// seconds.
func Start(t *testing.T, run RunFunc, args ...string) *Output {
	t.Helper()
	t.Setenv("REDIS_ADDR", "")
	ctx, cancel := context.WithCancel(context.Background())
	out := new(Output)
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run returned %v after shutdown, want nil", err)
			}
		case <-time.After(wait):
			t.Errorf("run did not return within %v of its context ending", wait)
		}
	})

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(wait)
	for {
		if strings.Contains(out.String(), "curl -i") {
			return out
		}
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("run returned %v before serving; output:\n%s", err, out.String())
		case <-deadline:
			t.Fatalf("no curl line printed within %v; output:\n%s", wait, out.String())
		case <-tick.C:
		}
	}
}

// curlLine matches the lines the examples print: curl -i, optional -X and
// -H options, a URL (quoted or not), and the expected status after a '#'.
var curlLine = regexp.MustCompile(`^\s*curl -i((?:\s+-X \S+|\s+-H '[^']*')*)\s+('[^']*'|\S+)\s+#\s*(\d{3})\b`)

var curlOpt = regexp.MustCompile(`-X (\S+)|-H '([^:']+):\s*([^']*)'`)

// Curl makes the request of every curl -i line in out, in order, and checks
// each answer's status against the one the line's comment promises. It
// reports how many lines it replayed and fails the test if there were none.
func Curl(t *testing.T, out string) int {
	t.Helper()
	client := Client()
	n := 0
	for _, line := range strings.Split(out, "\n") {
		m := curlLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n++
		want, _ := strconv.Atoi(m[3])
		method := http.MethodGet
		header := http.Header{}
		for _, o := range curlOpt.FindAllStringSubmatch(m[1], -1) {
			if o[1] != "" {
				method = o[1]
			} else {
				header.Add(o[2], o[3])
			}
		}
		got, _, err := Do(client, method, strings.Trim(m[2], "'"), header)
		if err != nil {
			t.Fatalf("%s: %v", strings.TrimSpace(line), err)
		}
		if got != want {
			t.Errorf("%s: status %d, want %d", strings.TrimSpace(line), got, want)
		}
	}
	if n == 0 {
		t.Fatalf("no curl -i lines in the output:\n%s", out)
	}
	return n
}

// Do makes one request and returns its status and header fields, after
// reading the body.
func Do(client *http.Client, method, url string, header http.Header) (int, http.Header, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		return 0, nil, fmt.Errorf("reading the body: %w", err)
	}
	return res.StatusCode, res.Header, nil
}

// Client returns the client [Curl] uses: no keep-alive, so that a server's
// graceful shutdown never waits on an idle connection.
func Client() *http.Client {
	return &http.Client{
		Timeout:   wait,
		Transport: &http.Transport{DisableKeepAlives: true},
	}
}

// Base returns the URL the example printed after "listening on ".
func Base(t *testing.T, out string) string {
	t.Helper()
	m := listening.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no \"listening on\" line in the output:\n%s", out)
	}
	return m[1]
}

var listening = regexp.MustCompile(`listening on (http://[^\s;]+)`)

// Output collects what an example prints. It is safe for concurrent use.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Output) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Output) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
