package sluicepage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The browser the page is tested in: Debian's chromium, driven from its
// command line (--dump-dom, --screenshot), so the tests need no DevTools
// client and no module beyond the standard library.

// chromiumEnv names the browser to run instead of the first of
// chromiumNames found on PATH.
const chromiumEnv = "SLUICE_CHROMIUM"

var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome"}

// findChromium returns the browser's path. Without one it skips the test,
// or fails it under CI (CI is "true" or "1", as package redistest decides
// for redis-server) or when SLUICE_CHROMIUM names a binary that is not
// there.
func findChromium(t *testing.T) string {
	t.Helper()
	path, fail, err := lookChromium()
	switch {
	case err == nil:
		return path
	case fail:
		t.Fatal(err)
	default:
		t.Skip(err)
	}
	return ""
}

// lookChromium finds the browser as findChromium does, and says whether a
// browser not found must fail the test.
func lookChromium() (path string, fail bool, err error) {
	if name := os.Getenv(chromiumEnv); name != "" {
		path, err := exec.LookPath(name)
		if err != nil {
			return "", true, fmt.Errorf("%s=%s: %w", chromiumEnv, name, err)
		}
		return path, false, nil
	}
	for _, name := range chromiumNames {
		if path, err := exec.LookPath(name); err == nil {
			return path, false, nil
		}
	}
	err = fmt.Errorf("no browser found on PATH (%s; or set %s): install Debian's chromium (apt-get install chromium)",
		strings.Join(chromiumNames, ", "), chromiumEnv)
	if ci := os.Getenv("CI"); ci == "1" || strings.EqualFold(ci, "true") {
		return "", true, fmt.Errorf("%w; CI requires it", err)
	}
	return "", false, err
}

// browser runs headless chromium on one address.
type browser struct {
	bin    string
	width  int // the window, in CSS pixels at a scale of 1
	height int
	// budget is the virtual time the page runs before chromium reports
	// on it: timers fire at once, and it does not advance while a fetch
	// is pending, so the page's refreshes happen without real waiting.
	budget time.Duration
}

// run runs chromium on url with extra (such as --dump-dom) and returns
// what it printed on stdout. Every host name but the test's loopback
// server fails to resolve, and chromium's own background traffic is off,
// so the run needs no network and reaches none.
func (b browser) run(t *testing.T, url string, extra ...string) []byte {
	t.Helper()
	args := []string{
		"--headless",
		"--no-sandbox", // it runs as root in CI containers; the page is our own
		"--disable-gpu",
		"--no-first-run",
		"--no-default-browser-check",
		"--disable-extensions",
		"--disable-sync",
		"--disable-background-networking",
		"--disable-component-update",
		"--disable-default-apps",
		"--no-proxy-server",
		"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
		"--hide-scrollbars",
		"--force-device-scale-factor=1",
		"--user-data-dir=" + t.TempDir(),
		"--window-size=" + strconv.Itoa(b.width) + "," + strconv.Itoa(b.height),
		"--virtual-time-budget=" + strconv.FormatInt(b.budget.Milliseconds(), 10),
	}
	args = append(append(args, extra...), url)
	// A hang guard only: a run takes a few seconds.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", b.bin, err, tail(stderr.String(), 2000))
	}
	return stdout.Bytes()
}

// dom returns the page's DOM at url, serialized, after the budget.
func (b browser) dom(t *testing.T, url string) string {
	t.Helper()
	return string(b.run(t, url, "--dump-dom"))
}

// screenshot returns a PNG of the window at url, after the budget.
func (b browser) screenshot(t *testing.T, url string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "page.png")
	b.run(t, url, "--screenshot="+path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("chromium wrote no screenshot: %v", err)
	}
	return data
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// shot is a decoded screenshot and what the tests count in it.
type shot struct {
	img image.Image
}

// decodeShot decodes data as a PNG of width by height pixels.
func decodeShot(data []byte, width, height int) (shot, error) {
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		return shot{}, fmt.Errorf("the screenshot is not a PNG: %w", err)
	}
	if b := img.Bounds(); b.Dx() != width || b.Dy() != height {
		return shot{}, fmt.Errorf("the screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), width, height)
	}
	return shot{img: img}, nil
}

// count returns how many pixels match.
func (s shot) count(match func(r, g, b uint8) bool) int {
	n := 0
	bounds := s.img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			c := color.NRGBAModel.Convert(s.img.At(x, y)).(color.NRGBA)
			if match(c.R, c.G, c.B) {
				n++
			}
		}
	}
	return n
}

// rgb returns a matcher of one colour, within tol per channel.
func rgb(hex string, tol int) func(r, g, b uint8) bool {
	v, err := strconv.ParseUint(strings.TrimPrefix(hex, "#"), 16, 32)
	if err != nil || len(hex) != 7 {
		panic(errors.New("rgb: want #rrggbb, got " + hex))
	}
	want := [3]int{int(v >> 16 & 0xff), int(v >> 8 & 0xff), int(v & 0xff)}
	return func(r, g, b uint8) bool {
		got := [3]int{int(r), int(g), int(b)}
		for i := range got {
			if d := got[i] - want[i]; d > tol || d < -tol {
				return false
			}
		}
		return true
	}
}

// TestLookChromium: a browser not found skips on a laptop and fails under
// CI, and one named by SLUICE_CHROMIUM that is not there always fails.
func TestLookChromium(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "chromium")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, path, ci, env string
		found, fail         bool
	}{
		{"on PATH", filepath.Dir(fake), "true", "", true, false},
		{"missing, laptop", t.TempDir(), "", "", false, false},
		{"missing, CI=true", t.TempDir(), "true", "", false, true},
		{"missing, CI=1", t.TempDir(), "1", "", false, true},
		{"named, there", t.TempDir(), "", fake, true, false},
		{"named, not there", filepath.Dir(fake), "", "/nonexistent/chromium", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PATH", tt.path)
			t.Setenv("CI", tt.ci)
			t.Setenv(chromiumEnv, tt.env)
			path, fail, err := lookChromium()
			if (err == nil) != tt.found || fail != tt.fail || (tt.found && path != fake) {
				t.Errorf("lookChromium() = %q, fail %v, %v; want found %v, fail %v", path, fail, err, tt.found, tt.fail)
			}
		})
	}
}
