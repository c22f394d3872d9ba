package sluicepage_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/sluicepage"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// event is a threshold event of key on a named limit of 100/m, with
// window w.
func event(key string, w time.Duration) core.ThresholdEvent {
	return core.ThresholdEvent{Key: key, Limit: core.PerMinute(100).WithName("api"), Threshold: 0.8, Remaining: 20, Window: w}
}

// TestWarningsRecorder records events and moves a fake clock: the
// recorder keeps the 100 most recent whose window has not ended, latest
// first.
func TestWarningsRecorder(t *testing.T) {
	type step struct {
		advance time.Duration
		record  []core.ThresholdEvent
	}
	many := make([]core.ThresholdEvent, 150)
	for i := range many {
		many[i] = event(fmt.Sprintf("k%03d", i), time.Hour)
	}
	want := func(from, to int) []string { // k<to-1> down to k<from>
		var keys []string
		for i := to - 1; i >= from; i-- {
			keys = append(keys, fmt.Sprintf("k%03d", i))
		}
		return keys
	}
	for _, tt := range []struct {
		name  string
		steps []step
		want  []string // keys, latest first
	}{
		{"none", nil, nil},
		{"one in its window", []step{
			{record: []core.ThresholdEvent{event("a", 10*time.Second)}},
			{advance: 10*time.Second - time.Nanosecond},
		}, []string{"a"}},
		{"one whose window ended", []step{
			{record: []core.ThresholdEvent{event("a", 10*time.Second)}},
			{advance: 10 * time.Second},
		}, nil},
		{"a zero window ends at once", []step{
			{record: []core.ThresholdEvent{event("a", 0)}},
		}, nil},
		{"latest first", []step{
			{record: []core.ThresholdEvent{event("a", time.Minute)}},
			{advance: time.Second, record: []core.ThresholdEvent{event("b", time.Minute)}},
			{advance: time.Second, record: []core.ThresholdEvent{event("c", time.Minute)}},
		}, []string{"c", "b", "a"}},
		{"a short window ends before a long one", []step{
			{record: []core.ThresholdEvent{event("long", time.Minute), event("short", 5*time.Second)}},
			{advance: 6 * time.Second},
		}, []string{"long"}},
		{"keeps the 100 most recent", []step{{record: many}}, want(50, 150)},
		{"ended ones make room", []step{
			{record: []core.ThresholdEvent{event("old", time.Second)}},
			{advance: time.Second, record: many[:100]},
		}, want(0, 100)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := &fakeClock{t: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
			w := new(sluicepage.Warnings)
			sluicepage.SetWarningsClock(w, clock.now)
			for _, s := range tt.steps {
				clock.advance(s.advance)
				for _, ev := range s.record {
					w.Record(ev)
				}
			}
			var got []string
			for _, e := range w.Recent() {
				got = append(got, e.Key)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Recent() keys = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestWarningsRecordsEvent checks the fields of a recorded event: its
// limit by name, or by text without one, and its window from the time it
// was recorded.
func TestWarningsRecordsEvent(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: at}
	w := new(sluicepage.Warnings)
	sluicepage.SetWarningsClock(w, clock.now)
	w.Record(core.ThresholdEvent{Key: "tenant:a", Limit: core.PerMinute(600).WithName("api"), Threshold: 0.8, Remaining: 120, Window: 12 * time.Second})
	clock.advance(time.Second)
	w.Record(core.ThresholdEvent{Key: "tenant:b", Limit: core.PerSecond(2).WithBurst(5), Threshold: 0.5, Remaining: 2, Window: time.Second})
	got := w.Recent()
	want := []sluicepage.Warning{
		{Limit: "2/s burst 5", Key: "tenant:b", Threshold: 0.5, Remaining: 2, At: at.Add(time.Second), Until: at.Add(2 * time.Second)},
		{Limit: "api", Key: "tenant:a", Threshold: 0.8, Remaining: 120, At: at, Until: at.Add(12 * time.Second)},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Recent() = %+v\nwant %+v", got, want)
	}
	got[0].Key = "changed" // a copy: the recorder's own stay
	if again := w.Recent(); again[0].Key != "tenant:b" {
		t.Error("Recent() returned the recorder's own slice: changing it changed the recorder")
	}
}

// TestWarningsConcurrent records and reads from many goroutines, on the
// zero value with the real clock (run with -race).
func TestWarningsConcurrent(t *testing.T) {
	var w sluicepage.Warnings
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				w.Record(event(fmt.Sprintf("g%d-%d", g, i), time.Hour))
				_ = w.Recent()
			}
		})
	}
	wg.Wait()
	if n := len(w.Recent()); n != 100 {
		t.Errorf("after 1600 events of an hour, Recent() holds %d, want 100", n)
	}
}
