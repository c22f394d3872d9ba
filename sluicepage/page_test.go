package sluicepage_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/sluicepage"
)

// data is the page's JSON as a test reads it.
type data struct {
	RefreshMS int64 `json:"refresh_ms"`
	Health    struct {
		Status string            `json:"status"`
		Error  string            `json:"error"`
		Data   sluicepage.Health `json:"data"`
		More   int               `json:"more"`
	} `json:"health"`
	Fleet struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   int    `json:"data"`
	} `json:"fleet"`
	Limits struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   []struct {
			Name   string   `json:"name"`
			Limits []string `json:"limits"`
		} `json:"data"`
		More int `json:"more"`
	} `json:"limits"`
	Top struct {
		Status string               `json:"status"`
		Error  string               `json:"error"`
		Data   []sluicepage.Talkers `json:"data"`
		More   int                  `json:"more"`
	} `json:"top"`
	Warnings struct {
		Status string               `json:"status"`
		Error  string               `json:"error"`
		Data   []sluicepage.Warning `json:"data"`
		More   int                  `json:"more"`
	} `json:"warnings"`
	Overrides struct {
		Status string                   `json:"status"`
		Error  string                   `json:"error"`
		Data   []sluicepage.OverrideSet `json:"data"`
		More   int                      `json:"more"`
	} `json:"overrides"`
}

// get serves one request of method to h at target and returns the
// response, its body read.
func get(t *testing.T, h http.Handler, method, target string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	resp := rec.Result()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// readData fetches and decodes the page's JSON.
func readData(t *testing.T, h http.Handler) (data, string) {
	t.Helper()
	resp, body := get(t, h, http.MethodGet, "/debug/sluice?format=json")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET ?format=json: status %d, want 200", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var d data
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("the data is not JSON: %v\n%s", err, body)
	}
	return d, body
}

func newPage(t *testing.T, src sluicepage.Source, opts ...sluicepage.Option) *sluicepage.Page {
	t.Helper()
	p, err := sluicepage.New(src, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewRefuses(t *testing.T) {
	var typedNil *sluicepage.LimiterSource
	for _, tt := range []struct {
		name string
		src  sluicepage.Source
		opts []sluicepage.Option
		want string
	}{
		{"nil source", nil, nil, "nil Source"},
		{"typed nil source", typedNil, nil, "nil Source"},
		{"nil option", &fakeSource{}, []sluicepage.Option{nil}, "option 0 of 1 is nil"},
		{"refresh too short", &fakeSource{}, []sluicepage.Option{sluicepage.WithRefresh(time.Millisecond)}, "WithRefresh(1ms)"},
		{"refresh too long", &fakeSource{}, []sluicepage.Option{sluicepage.WithRefresh(2 * time.Hour)}, "WithRefresh(2h0m0s)"},
		{"timeout zero", &fakeSource{}, []sluicepage.Option{sluicepage.WithTimeout(0)}, "WithTimeout(0s)"},
		{"timeout too long", &fakeSource{}, []sluicepage.Option{sluicepage.WithTimeout(time.Hour)}, "WithTimeout(1h0m0s)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := sluicepage.New(tt.src, tt.opts...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New() = %v, %v; want an error naming %q", p, err, tt.want)
			}
		})
	}
}

// TestHTML checks the page itself: static (no data in it), inline, its
// script and style allowed by its Content-Security-Policy by digest, and
// nothing it would load from elsewhere.
func TestHTML(t *testing.T) {
	p := newPage(t, &fakeSource{limits: []sluicepage.Limit{{Name: "secret-limit-name"}}})
	resp, body := get(t, p, http.MethodGet, "/debug/sluice")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: status %d, want 200", resp.StatusCode)
	}
	for header, want := range map[string]string{
		"Content-Type":           "text/html; charset=utf-8",
		"Cache-Control":          "no-store",
		"X-Content-Type-Options": "nosniff",
		"X-Frame-Options":        "DENY",
	} {
		if got := resp.Header.Get(header); got != want {
			t.Errorf("%s = %q, want %q", header, got, want)
		}
	}
	if strings.Contains(body, "secret-limit-name") {
		t.Error("the HTML holds the source's data; it must come only through the JSON")
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	for _, tag := range []string{"script", "style"} {
		blocks := regexp.MustCompile(`(?s)<`+tag+`>(.*?)</`+tag+`>`).FindAllStringSubmatch(body, -1)
		if len(blocks) != 1 {
			t.Fatalf("the page has %d %s elements, want 1", len(blocks), tag)
		}
		sum := sha256.Sum256([]byte(blocks[0][1]))
		if d := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, tag+"-src "+d) {
			t.Errorf("Content-Security-Policy %q does not allow the page's %s (%s)", csp, tag, d)
		}
	}
	if m := regexp.MustCompile(`(?i)(https?:|//[a-z0-9]|@import|url\()`).FindString(body); m != "" {
		t.Errorf("the page names something to load from elsewhere: %q", m)
	}
	if m := regexp.MustCompile(`(?i)\b(src|href)\s*=\s*"(?:[^d"]|d[^a"])`).FindString(body); m != "" {
		t.Errorf("the page links something other than a data: URL: %q", m)
	}
	if strings.Contains(body, "innerHTML") || strings.Contains(body, "insertAdjacentHTML") || strings.Contains(body, "document.write") {
		t.Error("the page's script writes HTML; it must write values as text")
	}
}

func TestMethods(t *testing.T) {
	p := newPage(t, &fakeSource{})
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		resp, _ := get(t, p, m, "/debug/sluice?format=json")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: status %d, Allow %q; want 405 and GET, HEAD", m, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	resp, body := get(t, p, http.MethodHead, "/debug/sluice")
	if resp.StatusCode != http.StatusOK || body != "" {
		t.Errorf("HEAD: status %d, %d bytes of body; want 200 and none", resp.StatusCode, len(body))
	}
}

// TestData checks the JSON: each section's status, the rows the page
// keeps, and HTML escaped by the encoder.
func TestData(t *testing.T) {
	var many []sluicepage.Limit
	for i := range 150 {
		many = append(many, sluicepage.Limit{Name: fmt.Sprintf("limit %03d", i), Limits: []core.Limit{core.PerSecond(i + 1)}})
	}
	var keys []sluicepage.Talker
	for i := range 120 {
		keys = append(keys, sluicepage.Talker{Key: fmt.Sprintf("k%d", i), Admitted: int64(1000 - i)})
	}
	src := &fakeSource{
		limits:   many,
		top:      []sluicepage.Talkers{{Limit: "api", ByAdmitted: keys, ByDenied: keys[:5], AdmittedError: 3}},
		warnErr:  sluicepage.ErrNotEnabled,
		health:   sluicepage.Health{Ready: true, AckMisses: 2},
		fleetErr: errors.New("fleet <unknown>"),
		overrides: []sluicepage.OverrideSet{{Name: "plans", Version: 4, Len: 2, Entries: []sluicepage.Override{
			{Key: "tenant:a", Value: "deny"}, {Key: "tenant:b", Value: "50/m burst 10"},
		}}},
	}
	d, body := readData(t, newPage(t, src, sluicepage.WithRefresh(1500*time.Millisecond)))
	if d.RefreshMS != 1500 {
		t.Errorf("refresh_ms = %d, want 1500", d.RefreshMS)
	}
	if d.Limits.Status != "ok" || len(d.Limits.Data) != 100 || d.Limits.More != 50 {
		t.Errorf("limits: status %q, %d rows, %d more; want ok, 100 rows, 50 more", d.Limits.Status, len(d.Limits.Data), d.Limits.More)
	}
	if got := d.Limits.Data[1]; got.Name != "limit 001" || len(got.Limits) != 1 || got.Limits[0] != "2/s" {
		t.Errorf("limits[1] = %+v, want limit 001: 2/s", got)
	}
	if d.Top.Status != "ok" || len(d.Top.Data) != 1 || len(d.Top.Data[0].ByAdmitted) != 100 ||
		len(d.Top.Data[0].ByDenied) != 5 || d.Top.Data[0].AdmittedError != 3 {
		t.Errorf("top = %+v, want one limit with 100 keys by admitted cost, 5 by denials, error 3", d.Top)
	}
	if d.Warnings.Status != "not_enabled" || d.Warnings.Error != "" {
		t.Errorf("warnings: status %q, error %q; want not_enabled and no error", d.Warnings.Status, d.Warnings.Error)
	}
	if d.Fleet.Status != "error" || d.Fleet.Error != "fleet <unknown>" {
		t.Errorf("fleet: status %q, error %q; want error, fleet <unknown>", d.Fleet.Status, d.Fleet.Error)
	}
	if !d.Health.Data.Ready || d.Health.Data.AckMisses != 2 {
		t.Errorf("health = %+v, want ready with 2 ack misses", d.Health.Data)
	}
	if d.Overrides.Status != "ok" || len(d.Overrides.Data) != 1 || d.Overrides.Data[0].Entries[1].Value != "50/m burst 10" {
		t.Errorf("overrides = %+v", d.Overrides)
	}
	if strings.Contains(body, "<unknown>") || !strings.Contains(body, `\u003cunknown\u003e`) {
		t.Errorf("the JSON holds < and > unescaped:\n%s", body)
	}
}

// TestSourceFails: a source that panics, or that is slower than the
// page's timeout, makes its section an error; the page still answers.
func TestSourceFails(t *testing.T) {
	d, _ := readData(t, newPage(t, &fakeSource{panics: "boom"}))
	if d.Limits.Status != "error" || !strings.Contains(d.Limits.Error, "boom") || d.Health.Status != "ok" {
		t.Errorf("a panicking Limits: limits %q %q, health %q; want error naming boom, health ok", d.Limits.Status, d.Limits.Error, d.Health.Status)
	}
	d, _ = readData(t, newPage(t, &fakeSource{block: true}, sluicepage.WithTimeout(20*time.Millisecond)))
	for name, sec := range map[string][2]string{
		"health": {d.Health.Status, d.Health.Error}, "fleet": {d.Fleet.Status, d.Fleet.Error},
		"limits": {d.Limits.Status, d.Limits.Error}, "top": {d.Top.Status, d.Top.Error},
		"warnings": {d.Warnings.Status, d.Warnings.Error}, "overrides": {d.Overrides.Status, d.Overrides.Error},
	} {
		if sec[0] != "error" || !strings.Contains(sec[1], "deadline exceeded") {
			t.Errorf("%s of a source slower than the timeout: %q %q, want an error naming the deadline", name, sec[0], sec[1])
		}
	}
}
