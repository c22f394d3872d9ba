//go:build unix

package pause

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// waitFor polls cond until it holds or a second has passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("after a second: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStopIsAPause: a helper process stops this one (SIGSTOP) for 150 ms
// and continues it. The interval around the stop overlaps a pause, both at
// once (the ticker is overdue) and once the ticker has run again (the
// pause is recorded).
func TestStopIsAPause(t *testing.T) {
	Watch()
	first := std.lastTick.Load()
	waitFor(t, "the ticker never ran", func() bool { Watch(); return std.lastTick.Load() != first })
	staller := exec.Command("sh", "-c", "sleep 0.05; kill -STOP $1; sleep 0.15; kill -CONT $1", "staller", strconv.Itoa(os.Getpid()))
	if err := staller.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = staller.Wait() }()
	// Watch the clock until it jumps: that is the stop.
	var start, end int64
	for prev, deadline := Now(), Now()+int64(5*time.Second); ; prev = end {
		time.Sleep(time.Millisecond)
		end = Now()
		if end-prev > int64(100*time.Millisecond) {
			start = prev
			break
		}
		if end > deadline {
			t.Fatal("this process was not stopped within 5 s")
		}
	}
	if !Overlaps(start, end) {
		t.Error("Overlaps right after the stop = false, want true")
	}
	after := std.lastTick.Load()
	waitFor(t, "the ticker never ran after the stop", func() bool { Watch(); return std.lastTick.Load() != after })
	if !Overlaps(start, end) {
		t.Error("Overlaps once the ticker ran again = false, want true (the pause is recorded)")
	}
}

// TestRecord: the ring keeps the most recent pauses and finds those that
// overlap an interval.
func TestRecord(t *testing.T) {
	var d detector
	for i := range keep + 3 {
		d.record(int64(i*100), int64(i*100+50))
	}
	if d.count != keep {
		t.Fatalf("count = %d, want %d", d.count, keep)
	}
	found := func(start, end int64) bool {
		for i := range d.count {
			if p := d.pauses[i]; p[0] < end && p[1] > start {
				return true
			}
		}
		return false
	}
	cases := []struct {
		start, end int64
		want       bool
	}{
		{0, 40, false}, // the oldest pauses were overwritten
		{int64((keep+2)*100 + 10), int64((keep+2)*100 + 20), true},  // inside the newest
		{int64((keep+2)*100 + 60), int64((keep+2)*100 + 90), false}, // between two
	}
	for _, c := range cases {
		if got := found(c.start, c.end); got != c.want {
			t.Errorf("a pause in [%d, %d] = %v, want %v", c.start, c.end, got, c.want)
		}
	}
}

// TestIdleStops: the detector's goroutine ends by itself after Idle
// without a Watch.
func TestIdleStops(t *testing.T) {
	Watch()
	for deadline := time.Now().Add(2*Idle + time.Second); std.running.Load(); {
		if time.Now().After(deadline) {
			t.Fatalf("the detector still runs %v after the last Watch", 2*Idle+time.Second)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
