package overrides

import (
	"context"
	"errors"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/testkit"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestOverridesOutageLogRationed steps the poller's report through a
// flapping Redis at fixed instants: one failure and one recovery line per
// window, flaps in between counted, and an outage that starts unlogged
// logged once it has lasted the window.
func TestOverridesOutageLogRationed(t *testing.T) {
	log := &testkit.Warnings{}
	lim, err := core.NewMemory(core.WithLogger(slog.New(infoToo{log})))
	if err != nil {
		t.Fatal(err)
	}
	ov, err := New(lim, "p")
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	t0 := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	down := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	for _, st := range []struct {
		at   time.Duration
		err  error
		want string // the line logged, "" for none
	}{
		{0, down, "cannot read the overrides"},
		{time.Second, down, ""},
		{2 * time.Second, nil, "read from Redis again"},
		{3 * time.Second, down, ""}, // a flap: counted
		{4 * time.Second, nil, ""},
		{5 * time.Second, down, ""},
		{6 * time.Second, nil, ""},
		{7 * time.Second, down, ""},
		{11 * time.Second, down, ""}, // lasting, within the window of the last line
		{12 * time.Second, down, "cannot read the overrides from Redis; the last ones read stay in force overrides=p version=0 reason="},
		{13 * time.Second, down, ""},
		{14 * time.Second, nil, "read from Redis again"},
		{30 * time.Second, down, "cannot read"}, // a new outage, past the window
		{31 * time.Second, nil, "read from Redis again"},
	} {
		before := len(log.Lines())
		ov.report(at(st.at), st.err)
		got := log.Lines()[before:]
		switch {
		case st.want == "" && len(got) != 0:
			t.Errorf("at %v (%v): logged %q, want nothing", st.at, st.err, got)
		case st.want != "" && (len(got) != 1 || !strings.Contains(got[0], st.want)):
			t.Errorf("at %v (%v): logged %q, want one line with %q", st.at, st.err, got, st.want)
		}
	}
	// The flaps at 3s and 5s were not logged; the outage from 7s was, at 12s.
	if l := log.Lines()[2]; !strings.Contains(l, "outages_not_logged=2") {
		t.Errorf("the line after the flaps = %q, want outages_not_logged=2", l)
	}
}

// infoToo passes Info lines to a warnings recorder too.
type infoToo struct{ *testkit.Warnings }

func (infoToo) Enabled(context.Context, slog.Level) bool { return true }
