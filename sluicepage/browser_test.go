package sluicepage_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/sluicepage"
)

// The page's colours the screenshot is checked for (page.css).
const (
	colourBackground = "#f6f8fa"
	colourOK         = "#1a7f37" // the "ready" badge and the "live" dot
)

// shotEnv names a file to which TestPageInChromium also writes its
// screenshot, to refresh the one the docs show:
//
//	SLUICE_PAGE_SCREENSHOT=$PWD/docs/page.png go test -run TestPageInChromium ./sluicepage
const shotEnv = "SLUICE_PAGE_SCREENSHOT"

// TestPageInChromium mounts the page of a running limiter (a real
// redis-server, a fleet of two, top talkers kept, a rule with a warning
// threshold, a set of overrides) on a test server and opens it in
// headless chromium: its script runs, fetches the data and writes it into
// the page, and a refresh brings an override set after the first fetch.
// The DOM must show the limits, the fleet's size, the store ready, the
// heaviest keys of each limit with their counts, the key that crossed the
// threshold, and the overrides; the screenshot must be a PNG of the
// window, not blank, with the "ready" badge and the "live" dot in it.
func TestPageInChromium(t *testing.T) {
	b := browser{bin: findChromium(t), width: 1100, height: 1140, budget: 5 * time.Second}
	srv := redistest.Start(t)
	ctx := context.Background()
	outages, warnings := new(sluicepage.Outages), new(sluicepage.Warnings)
	newLimiter := func(opts ...core.Option) *core.Limiter {
		lim, err := core.New(redistest.NewClient(t, srv.Addr()), append([]core.Option{core.WithTimeout(time.Second),
			core.WithFleet(core.Fleet{Name: "page"})}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lim.Close() })
		return lim
	}
	// A heartbeat of 1 s (the default): a stall of this process shorter
	// than 3 s does not count an instance out while the page reads.
	lim, _ := newLimiter(core.WithObserver(outages), core.WithThresholdHandler(warnings.Record),
		core.WithTopTalkers(core.TopTalkers{K: 5, Names: true})), newLimiter()
	testkit.WaitFor(t, 20*time.Second, "a fleet of two", func() bool { return lim.FleetSize() == 2 })

	plans, err := overrides.New(lim, "plans", overrides.WithRefresh(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plans.Close() })
	setOverride(t, plans, "tenant:acme", "50/m burst 10")
	setOverride(t, plans, "tenant:mallory", "deny")

	// Traffic: tenant:acme crosses api's warning threshold (48 of 60),
	// tenant:globex uses a little, and user:mallory is denied at login.
	// Hourly and daily: no token comes back while the test runs.
	api, login := core.PerHour(60).WithName("api"), core.PerHour(5).WithName("login")
	apiRule, err := lim.Prepare(api)
	if err == nil {
		apiRule, err = apiRule.WithWarning(0.8)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		key    string
		n      int
		allow  func(string) (core.Result, error)
		denied int
	}{
		{"tenant:acme", 50, func(k string) (core.Result, error) { return apiRule.Allow(ctx, k) }, 0},
		{"tenant:globex", 7, func(k string) (core.Result, error) { return apiRule.Allow(ctx, k) }, 0},
		{"user:mallory", 9, func(k string) (core.Result, error) { return lim.Allow(ctx, k, login, core.PerDay(20)) }, 4},
		{"user:bob", 2, func(k string) (core.Result, error) { return lim.Allow(ctx, k, login, core.PerDay(20)) }, 0},
	} {
		denied := 0
		for range r.n {
			res, err := r.allow(r.key)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Allowed {
				denied++
			}
		}
		if denied != r.denied {
			t.Fatalf("%s was denied %d of %d requests, want %d", r.key, denied, r.n, r.denied)
		}
	}
	src, err := sluicepage.ForLimiter(lim,
		sluicepage.ShowLimits("api", api),
		sluicepage.ShowLimits("login", login, core.PerDay(20)),
		sluicepage.ShowOverrides(plans),
		sluicepage.ShowOutages(outages),
		sluicepage.ShowWarnings(warnings))
	if err != nil {
		t.Fatal(err)
	}
	page, err := sluicepage.New(src, sluicepage.WithRefresh(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The second fetch of the data finds an override the first did not:
	// the page must show it, so it refreshed.
	var fetches atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("/debug/sluice", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("format") == "json" && fetches.Add(1) == 2 {
			setOverride(t, plans, "tenant:late", "7/s")
		}
		page.ServeHTTP(w, r)
	}))
	ts := httptest.NewServer(mux)
	defer ts.Close()

	dom := b.dom(t, ts.URL+"/debug/sluice")
	if n := fetches.Load(); n < 2 {
		t.Fatalf("the page fetched its data %d times in %s of virtual time, want 2 or more", n, b.budget)
	}
	for _, want := range []struct{ section, text string }{
		{"fleet", `id="fleet-size">2<`},
		{"health", `class="badge ready">ready<`},
		{"limits", `>api<`},
		{"limits", `>60/h name api<`},
		{"limits", `>login<`},
		{"limits", `>5/h name login; 20/d<`},
		{"top", `api · admitted 57, denied 0`},
		{"top", `>tenant:acme<`},
		{"top", `>50<`},
		{"top", `>tenant:globex<`},
		{"top", `login · admitted 7, denied 4`},
		{"top", `>user:mallory<`},
		{"top", `>user:bob<`},
		{"warnings", `>api<`},
		{"warnings", `>tenant:acme<`},
		{"warnings", `>80%<`},
		{"warnings", `>12<`},
		{"overrides", `>tenant:acme<`},
		{"overrides", `>50/m burst 10<`},
		{"overrides", `>tenant:mallory<`},
		{"overrides", `>deny<`},
		{"overrides", `>tenant:late<`},
		{"overrides", `plans · version 3 · 3 entries`},
	} {
		if got := section(dom, want.section); !strings.Contains(got, want.text) {
			t.Errorf("section %s of the page lacks %q:\n%s", want.section, want.text, got)
		}
	}
	if !strings.Contains(dom, `class="dot live"`) {
		t.Errorf("the page does not say it is live:\n%s", dom)
	}

	png := b.screenshot(t, ts.URL+"/debug/sluice")
	s, err := decodeShot(png, b.width, b.height)
	if err != nil {
		t.Fatal(err)
	}
	total := b.width * b.height
	background := s.count(func(r, g, bl uint8) bool {
		return rgb(colourBackground, 0)(r, g, bl) || (r == 255 && g == 255 && bl == 255)
	})
	if ink := total - background; ink < total/50 {
		t.Errorf("the screenshot is nearly blank: %d of %d pixels are not background", ink, total)
	}
	// The badge (about 60x22) and the dot (12x12) are drawn only once the
	// data came and said the store is ready.
	if ok := s.count(rgb(colourOK, 2)); ok < 600 {
		t.Errorf("the screenshot has %d pixels of the ready badge's and live dot's colour %s, want 600 or more", ok, colourOK)
	}
	if path := os.Getenv(shotEnv); path != "" {
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", path, len(png))
	}
}

// TestPageEscapesInChromium gives the page keys, names and errors that
// are HTML, in every section, and opens it in headless chromium: each
// shows as text, and none adds an element to the page.
func TestPageEscapesInChromium(t *testing.T) {
	b := browser{bin: findChromium(t), width: 1000, height: 800, budget: 3 * time.Second}
	const (
		img    = `<img src=x onerror="document.title='pwned'">`
		script = `</script><script>document.title='pwned'</script>`
		svg    = `"><svg onload=alert(1)>`
	)
	src := &fakeSource{
		limits: []sluicepage.Limit{{Name: img, Limits: []core.Limit{core.PerMinute(60)}}},
		top: []sluicepage.Talkers{{
			Limit: svg,
			ByAdmitted: []sluicepage.Talker{
				{Key: script, Admitted: 90, Denied: 7},
				{Key: "tenant:plain", Admitted: 45, Denied: 0},
			},
			ByDenied:      []sluicepage.Talker{{Key: "tenant:denied", Admitted: 3, Denied: 31}},
			Admitted:      135,
			Denied:        38,
			AdmittedError: 4,
			Since:         time.Now().Add(-time.Minute),
		}},
		warnings: []sluicepage.Warning{{Limit: img, Key: svg, Threshold: 0.8, Remaining: 12,
			At: time.Now().Add(-time.Second), Until: time.Now().Add(time.Minute)}},
		health:    sluicepage.Health{Cause: script, Outages: []sluicepage.Outage{{Node: img, Since: time.Now(), Err: svg}}},
		fleetErr:  errors.New(img),
		overrides: []sluicepage.OverrideSet{{Name: svg, Version: 1, Len: 1, Entries: []sluicepage.Override{{Key: img, Value: script}}}},
	}
	page, err := sluicepage.New(src)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(page)
	defer ts.Close()
	dom := b.dom(t, ts.URL)

	for _, bad := range []string{"<img", "<svg", "pwned</title>"} {
		if strings.Contains(dom, bad) {
			t.Errorf("the page holds %q: a value was parsed as HTML:\n%s", bad, dom)
		}
	}
	if n := strings.Count(dom, "<script"); n != 1 {
		t.Errorf("the page holds %d script elements, want its own alone:\n%s", n, dom)
	}
	text := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")
	for _, want := range []struct{ section, value string }{
		{"limits", img},
		{"top", svg},
		{"top", script},
		{"warnings", img},
		{"warnings", svg},
		{"health", script},
		{"health", img},
		{"health", svg},
		{"fleet", "error: " + img},
		{"overrides", svg},
		{"overrides", img},
		{"overrides", script},
	} {
		if got := section(dom, want.section); !strings.Contains(got, text.Replace(want.value)) {
			t.Errorf("section %s does not show %q as text:\n%s", want.section, want.value, got)
		}
	}
	for _, want := range []struct{ section, markup string }{
		{"top", ">tenant:plain<"},
		{"top", ">90<"},
		{"top", ">7<"},
		{"top", ">tenant:denied<"},
		{"top", ">31<"},
		{"top", "admitted 135, denied 38"},
		{"top", ">by admitted cost (±4)<"},
		{"top", ">by denials<"},
		{"warnings", ">80%<"},
		{"warnings", ">12<"},
		{"health", ">not ready<"},
	} {
		if got := section(dom, want.section); !strings.Contains(got, want.markup) {
			t.Errorf("section %s lacks %q:\n%s", want.section, want.markup, got)
		}
	}
}

// section returns the serialized section of dom whose id is id.
func section(dom, id string) string {
	start := strings.Index(dom, `<section id="`+id+`"`)
	if start < 0 {
		return ""
	}
	end := strings.Index(dom[start:], "</section>")
	if end < 0 {
		return dom[start:]
	}
	return dom[start : start+end]
}

// setOverride sets key's override in set from its text form.
func setOverride(t *testing.T, set *overrides.Set, key, text string) {
	t.Helper()
	o, err := overrides.Parse(text)
	if err == nil {
		err = set.Set(context.Background(), key, o)
	}
	if err != nil {
		t.Errorf("setting %s to %q: %v", key, text, err) // Error, not Fatal: it runs in handlers too
	}
}
