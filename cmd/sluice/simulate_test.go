package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// offlineRun runs the command with args (no Redis flags) and returns its
// exit code, standard output and standard error.
func offlineRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestConvertAndSimulate converts an access log, bad lines and all, and
// simulates it under a limits file.
func TestConvertAndSimulate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	access := write("access.log", `203.0.113.7 - - [28/Nov/2026:22:00:00 +0000] "GET /a?x=1 HTTP/1.1" 200 512 "-" "curl/8"
203.0.113.7 - - [28/Nov/2026:22:00:00 +0000] "GET /a HTTP/1.1" 200 512 "-" "curl/8"
203.0.113.7 - - [28/Nov/2026:22:00:00 +0000] "GET /b HTTP/1.1" 500 0 "-" "curl/8"
198.51.100.1 - alice [28/Nov/2026:23:00:01 +0100] "POST /login HTTP/1.1" 401 0
a line of something else
203.0.113.7 - - [28/Nov/2026:22:00:01 +0000] "GET /a HTTP/1.1" 200 512 "-" "curl/8"
`)
	events := filepath.Join(dir, "events.jsonl")
	code, _, errText := offlineRun(t, "convert", "-key", "ip", "-in", access, "-out", events)
	if code != 0 || !strings.Contains(errText, "line 5: not in the combined log format (skipped)") || !strings.Contains(errText, "5 events from 6 lines") {
		t.Fatalf("convert: exit %d, %s", code, errText)
	}
	got, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"time":"2026-11-28T22:00:00.000000Z","key":"ip:203.0.113.7","status":200}
{"time":"2026-11-28T22:00:00.000000Z","key":"ip:203.0.113.7","status":200}
{"time":"2026-11-28T22:00:00.000000Z","key":"ip:203.0.113.7","status":500}
{"time":"2026-11-28T22:00:01.000000Z","key":"ip:198.51.100.1","status":401}
{"time":"2026-11-28T22:00:01.000000Z","key":"ip:203.0.113.7","status":200}
`
	if string(got) != want {
		t.Fatalf("converted:\n%s\nwant:\n%s", got, want)
	}
	code, out, _ := offlineRun(t, "convert", "-key", "request", "-prefix", "", "-in", access)
	if code != 0 || !strings.Contains(out, `"key":"POST /login","status":401`) || !strings.Contains(out, `"key":"GET /a"`) {
		t.Fatalf("convert -key request: exit %d\n%s", code, out)
	}

	limits := write("limits.txt", `current key 600/m
tight   key 2/s               | charge-if 500-599
`)
	code, out, errText = offlineRun(t, "simulate", "-limits", limits, "-log", events, "-top", "1", "-deny-at-most", "0")
	wantOut := `5 events from 2026-11-28T22:00:00Z to 2026-11-28T22:00:01Z
rule current: 5 events, 5 admitted, 0 denied (0.00%)
  600/1m0s burst 600: 0 denied
rule tight: 5 events, 5 admitted, 0 denied (0.00%)
  2/1s burst 2: 0 denied
`
	if code != 0 || out != wantOut || errText != "" {
		t.Fatalf("simulate: exit %d\n%s\nwant\n%s\nstderr %s", code, out, wantOut, errText)
	}
	// Charging every status, the third request at 22:00:00 is denied.
	limits = write("limits2.txt", "tight key 2/s\n")
	bad := write("bad.jsonl", string(got)+"{oops\n")
	code, out, errText = offlineRun(t, "simulate", "-limits", limits, "-log", bad, "-deny-at-most", "0")
	if code != 0 || !strings.Contains(out, "rule tight: 5 events, 4 admitted, 1 denied (20.00%)") ||
		!strings.Contains(out, "first at 2026-11-28T22:00:00.000000Z (ip:203.0.113.7)") || !strings.Contains(errText, "line 6: not JSON") {
		t.Fatalf("simulate: exit %d\n%s\nstderr %s", code, out, errText)
	}
}

func TestSimulateUsageErrors(t *testing.T) {
	dir := t.TempDir()
	limits := filepath.Join(dir, "limits.txt")
	if err := os.WriteFile(limits, []byte("a key 5/s\nb key 5/q\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args    []string
		code    int
		errText string
	}{
		{[]string{"simulate"}, 2, "usage:"},
		{[]string{"simulate", "-limits", limits}, 2, "usage:"},
		{[]string{"simulate", "-limits", limits, "-log", "x", "extra"}, 2, "unexpected arguments"},
		{[]string{"simulate", "-limits", limits, "-log", "x"}, 2, "line 2"},
		{[]string{"simulate", "-limits", filepath.Join(dir, "none"), "-log", "x"}, 2, "no such file"},
		{[]string{"simulate", "-limits", limits, "-log", "x", "-deny-at-most", "100"}, 2, "-deny-at-most"},
		{[]string{"convert", "-key", "colour"}, 2, `-key "colour"`},
		{[]string{"convert", "-key", "ip", "-in", filepath.Join(dir, "none")}, 1, "no such file"},
	}
	for _, tt := range tests {
		code, _, errText := offlineRun(t, tt.args...)
		if code != tt.code || !strings.Contains(errText, tt.errText) {
			t.Errorf("sluice %q: exit %d, %q; want %d and %q", tt.args, code, errText, tt.code, tt.errText)
		}
	}
}
