package replay_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/replay"
	"github.com/sluicehq/sluice/internal/leakcheck"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }

// TestRecorderSampledByKey checks the keyed sample: about the fraction
// of keys, the same keys on every recorder, and a key sampled at 5%
// sampled at 20%.
func TestRecorderSampledByKey(t *testing.T) {
	rec := func(f float64) *replay.Recorder {
		r, err := replay.NewRecorder(&bytes.Buffer{}, f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	five, twenty, again, all, none := rec(0.05), rec(0.2), rec(0.2), rec(1), rec(0)
	const n = 20_000
	var n5, n20 int
	for i := range n {
		k := fmt.Sprint("tenant:", i)
		s5, s20 := five.Sampled(k), twenty.Sampled(k)
		if s5 && !s20 {
			t.Fatalf("%s sampled at 5%%, not at 20%%", k)
		}
		if s20 != again.Sampled(k) || !all.Sampled(k) || none.Sampled(k) {
			t.Fatalf("%s: sampled differently by recorders of the same fraction", k)
		}
		if s5 {
			n5++
		}
		if s20 {
			n20++
		}
	}
	if math.Abs(float64(n5)/n-0.05) > 0.01 || math.Abs(float64(n20)/n-0.2) > 0.01 {
		t.Fatalf("sampled %d and %d of %d keys at 5%% and 20%%", n5, n20, n)
	}
}

// TestNewRecorderRefuses checks the constructor's errors.
func TestNewRecorderRefuses(t *testing.T) {
	for _, f := range []float64{-0.1, 1.01, math.NaN()} {
		if r, err := replay.NewRecorder(&bytes.Buffer{}, f); err == nil {
			r.Close()
			t.Errorf("NewRecorder(w, %v) accepted", f)
		}
	}
	if _, err := replay.NewRecorder(nil, 1); err == nil {
		t.Error("NewRecorder(nil, 1) accepted")
	}
}

// blockingWriter blocks every Write until release is closed.
type blockingWriter struct {
	release chan struct{}
	buf     bytes.Buffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	return w.buf.Write(p)
}

// TestRecorderNeverBlocks records into a writer that blocks: Record
// returns at once, drops what the queue cannot hold and counts it; once
// the writer moves again, Close writes what was queued.
func TestRecorderNeverBlocks(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	rec, err := replay.NewRecorder(w, 1)
	if err != nil {
		t.Fatal(err)
	}
	ev := replay.Event{Time: time.Date(2026, 11, 28, 22, 0, 0, 0, time.UTC), Key: "k", Cost: 1}
	const n = 100_000
	done := make(chan struct{})
	go func() {
		for range n {
			rec.Record(ev)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a hang guard only
		t.Fatal("Record blocked on a blocked writer")
	}
	close(w.release)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	st := rec.Stats()
	if st.Dropped == 0 || st.Written+st.Dropped != n || st.Failed != 0 {
		t.Fatalf("stats %+v after %d events into a blocked writer", st, n)
	}
	if lines := int64(strings.Count(w.buf.String(), "\n")); lines != st.Written {
		t.Fatalf("%d lines written, stats say %d", lines, st.Written)
	}
	rec.Record(ev) // after Close: dropped
	if rec.Stats().Dropped != st.Dropped+1 {
		t.Fatal("an event recorded after Close was not counted as dropped")
	}
}

// failingWriter fails its first writes, then succeeds.
type failingWriter struct {
	mu    sync.Mutex
	fails int
	buf   bytes.Buffer
}

var errDisk = errors.New("disk full")

func (w *failingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fails > 0 {
		w.fails--
		return 0, errDisk
	}
	return w.buf.Write(p)
}

// TestRecorderWriteErrors checks that a failing writer costs events, which
// are counted, not the recorder: later writes go through, and Close
// returns the first error.
func TestRecorderWriteErrors(t *testing.T) {
	w := &failingWriter{fails: 2}
	rec, err := replay.NewRecorder(w, 1)
	if err != nil {
		t.Fatal(err)
	}
	ev := replay.Event{Time: time.Date(2026, 11, 28, 22, 0, 0, 0, time.UTC), Key: "k", Cost: 1}
	for i := range 10 {
		rec.Record(ev)
		// Let each be written before the next (a hang guard only).
		for deadline := time.Now().Add(time.Minute); rec.Stats().Written+rec.Stats().Failed <= int64(i) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	if err := rec.Close(); !errors.Is(err, errDisk) {
		t.Fatalf("Close = %v, want %v", err, errDisk)
	}
	st := rec.Stats()
	if st.Failed != 2 || st.Written != 8 || strings.Count(w.buf.String(), "\n") != 8 {
		t.Fatalf("stats %+v, %d lines; want 2 failed, 8 written", st, strings.Count(w.buf.String(), "\n"))
	}
}
