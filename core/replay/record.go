package replay

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/core/internal/model"
)

// Recorder writes events in the log format to a writer, for keys chosen
// by a keyed sample: a middleware given one (policy.WithRecord, in every
// adapter) records the decisions of its requests, so that a replay can
// try other limits on real traffic.
//
// Recording never blocks nor fails a request: [Recorder.Record] puts the
// event in a bounded queue, or drops it when the queue is full or the
// recorder is closed, and one goroutine of the recorder's own writes the
// queue through a buffer. A write error is logged once (with
// slog.Default) and counted, and the events it lost with it; later
// writes are tried again. [Recorder.Stats] reports the counts.
//
// A Recorder is safe for concurrent use. Its goroutine runs from
// [NewRecorder] until [Recorder.Close], which writes what is queued;
// the writer stays the caller's to close, after Close.
type Recorder struct {
	w         *bufio.Writer
	under     io.Writer
	queue     chan Event
	stop      chan struct{}
	done      chan struct{}
	closed    atomic.Bool
	closeOnce sync.Once
	threshold uint64 // a key is sampled when its hash is below; all keys at math.MaxUint64 with all set
	all       bool
	written   atomic.Int64
	dropped   atomic.Int64
	failed    atomic.Int64
	said      atomic.Bool
	err       error // the first write error, for Close
}

// RecorderStats are a recorder's counts.
type RecorderStats struct {
	// Written is how many events were written to the writer (flushed).
	Written int64
	// Dropped is how many sampled events were not queued: the queue was
	// full, or the recorder closed.
	Dropped int64
	// Failed is how many queued events a write error lost (with the
	// others in the buffer at the time).
	Failed int64
}

// queueSize bounds the events waiting to be written.
const queueSize = 4096

// NewRecorder returns a recorder writing to w the events of a fraction
// of keys, from 0 to 1: a key is recorded whole or not at all, chosen by
// a fixed hash of the key, so a replay sees every request of the keys it
// sees, and every replica and restart records the same keys (see
// [Recorder.Sampled]). It returns an error for a nil writer and a
// fraction that is NaN or outside [0, 1]. Close it when done.
func NewRecorder(w io.Writer, fraction float64) (*Recorder, error) {
	if w == nil {
		return nil, errors.New("replay: NewRecorder: nil writer")
	}
	if !(fraction >= 0 && fraction <= 1) {
		return nil, fmt.Errorf("replay: NewRecorder: fraction %v is not from 0 to 1", fraction)
	}
	r := &Recorder{
		w:     bufio.NewWriterSize(w, 64<<10),
		under: w,
		queue: make(chan Event, queueSize),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		all:   fraction == 1,
	}
	if !r.all {
		r.threshold = uint64(fraction * math.MaxUint64)
		if fraction > 0 && r.threshold == 0 {
			r.threshold = 1
		}
	}
	go r.run()
	return r, nil
}

// Sampled reports whether the recorder records key's events (for a
// path, its root's key): whether a fixed 64-bit hash of the key is below
// the fraction of 2^64. The choice depends on the key alone, so it is the
// same on every replica and after restarts, and a key sampled at 5% is
// sampled at 20%.
func (r *Recorder) Sampled(key string) bool {
	return r.all || model.KeyHash(key) < r.threshold
}

// Record queues ev to be written, without waiting: when the queue is
// full or the recorder closed, ev is dropped and counted. The recorder
// keeps ev's strings as they are: a caller whose strings live in reused
// memory (fiber's) copies them first. Record does not check
// [Recorder.Sampled]; the caller does, before it builds ev.
func (r *Recorder) Record(ev Event) {
	if r.closed.Load() {
		r.dropped.Add(1)
		return
	}
	select {
	case r.queue <- ev:
	default:
		r.dropped.Add(1)
	}
}

// run writes queued events until stop, then what is left.
func (r *Recorder) run() {
	defer close(r.done)
	var buf []byte
	var pending int64 // events in the buffer, not yet flushed
	write := func(ev Event) {
		buf = AppendLine(buf[:0], ev)
		if _, err := r.w.Write(buf); err != nil {
			// The buffer is lost with the event: start again with an
			// empty one, which later writes may get through.
			r.fail(err, pending+1)
			pending = 0
			r.w.Reset(r.under)
			return
		}
		pending++
	}
	flush := func() {
		if pending == 0 {
			return
		}
		if err := r.w.Flush(); err != nil {
			r.fail(err, pending)
			r.w.Reset(r.under)
		} else {
			r.written.Add(pending)
		}
		pending = 0
	}
	for {
		select {
		case ev := <-r.queue:
			write(ev)
			if len(r.queue) == 0 {
				flush()
			}
		case <-r.stop:
			for {
				select {
				case ev := <-r.queue:
					write(ev)
				default:
					flush()
					return
				}
			}
		}
	}
}

// fail counts a write error that lost n events, and logs the first.
func (r *Recorder) fail(err error, n int64) {
	r.failed.Add(n)
	if r.err == nil {
		r.err = err
	}
	if !r.said.Swap(true) {
		slog.Default().Warn("sluice: the replay recorder could not write; events are lost until writes succeed again (logged once)", "error", err.Error())
	}
}

// Stats returns the recorder's counts so far.
func (r *Recorder) Stats() RecorderStats {
	return RecorderStats{Written: r.written.Load(), Dropped: r.dropped.Load(), Failed: r.failed.Load()}
}

// Close stops the recorder: it writes the events queued, flushes, and
// returns the first write error, if any. Events recorded after Close are
// dropped. Close may be called more than once.
func (r *Recorder) Close() error {
	r.closeOnce.Do(func() {
		r.closed.Store(true)
		close(r.stop)
	})
	<-r.done
	return r.err
}
