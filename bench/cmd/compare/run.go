package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// tally is what a load produced: decisions split by outcome, and latency.
type tally struct {
	allowed  uint64 // admitted by the store
	denied   uint64 // denied by the store (or by a cache in front of it)
	degraded uint64 // decided without Redis (ErrDegraded)
	admitDeg uint64 // of those, admitted
	errs     uint64 // calls that returned another error
	firstErr error
	elapsed  time.Duration // from the start until the last call returned
	sending  time.Duration // from the start until the last call was sent
	lastSend time.Time     // when the last call was made
	backIn   []uint32      // calls returned per slot of the load's slot width, if asked
	sentIn   []uint32      // calls sent per slot, likewise
	begin    time.Time     // when the load began: slot 0's start
	hist     bench.Histogram
}

// decisions counts the store's decisions: allowed and denied, without the
// degraded ones and the errors.
func (t *tally) decisions() uint64 { return t.allowed + t.denied }

func (t *tally) calls() uint64 { return t.allowed + t.denied + t.degraded + t.errs }

func (t *tally) add(o *tally) {
	t.allowed += o.allowed
	t.denied += o.denied
	t.degraded += o.degraded
	t.admitDeg += o.admitDeg
	t.errs += o.errs
	if t.firstErr == nil {
		t.firstErr = o.firstErr
	}
	if o.lastSend.After(t.lastSend) {
		t.lastSend = o.lastSend
	}
	t.backIn = addSlots(t.backIn, o.backIn)
	t.sentIn = addSlots(t.sentIn, o.sentIn)
	t.hist.Merge(&o.hist)
}

func addSlots(a, b []uint32) []uint32 {
	if len(a) < len(b) {
		a = append(a, make([]uint32, len(b)-len(a))...)
	}
	for i, c := range b {
		a[i] += c
	}
	return a
}

func (t *tally) count(ok bool, err error) {
	switch {
	case err == nil && ok:
		t.allowed++
	case err == nil:
		t.denied++
	case errors.Is(err, bench.ErrDegraded):
		t.degraded++
		if ok {
			t.admitDeg++
		}
	default:
		t.errs++
		if t.firstErr == nil {
			t.firstErr = err
		}
	}
}

// load runs callers goroutines that call lim back to back for d, each picking
// its key uniformly from keys, and records every call's latency. All callers
// start together; the result's elapsed runs from their start until the last
// call in flight at the deadline has returned, and start is when they began.
// If slot is not zero, the tally also counts the calls sent and returned
// in each slot of that width from the start (and a little after the end).
func load(lim bench.Limiter, keys []string, callers int, d, slot time.Duration) (t *tally, start time.Time) {
	return loadAll([]bench.Limiter{lim}, keys, callers, d, slot, 0)
}

// loadAll is load over several limiters with each callers of their own:
// caller i calls lims[i/each]. Caller i draws its keys from a generator
// seeded with seed+i+1, so processes that share the work can be given
// seeds that do not repeat one another's key sequences.
func loadAll(lims []bench.Limiter, keys []string, each int, d, slot time.Duration, seed uint64) (t *tally, start time.Time) {
	ctx := context.Background()
	parts := make([]tally, len(lims)*each)
	if slot > 0 {
		n := int((d+d/2)/slot) + 1
		for i := range parts {
			parts[i].backIn, parts[i].sentIn = make([]uint32, n), make([]uint32, n)
		}
	}
	gate := make(chan struct{})
	var wg sync.WaitGroup
	var begin time.Time
	for i := range parts {
		wg.Add(1)
		go func(lim bench.Limiter, t *tally, seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 0x5eed))
			n := len(keys)
			<-gate
			end := begin.Add(d)
			t0 := time.Now()
			for {
				key := keys[0]
				if n > 1 {
					key = keys[r.IntN(n)]
				}
				ok, err := lim.Allow(ctx, key)
				t1 := time.Now()
				if slot > 0 {
					if i := int(t0.Sub(begin) / slot); i >= 0 && i < len(t.sentIn) {
						t.sentIn[i]++
					}
					if i := int(t1.Sub(begin) / slot); i < len(t.backIn) {
						t.backIn[i]++
					}
				}
				t.hist.Record(t1.Sub(t0))
				t.count(ok, err)
				if t1.After(end) {
					t.lastSend = t0
					return
				}
				t0 = t1
			}
		}(lims[i/each], &parts[i], seed+uint64(i)+1)
	}
	begin = time.Now()
	close(gate)
	wg.Wait()
	total := &tally{elapsed: time.Since(begin), begin: begin}
	for i := range parts {
		total.add(&parts[i])
	}
	total.sending = total.lastSend.Sub(begin)
	return total, begin
}

// idealIn returns the range of what a perfect bucket for lim, full at the
// load's start, admits of the calls t counted per slot of width slot (see
// loadAll). A perfect limiter decides each call between its send and its
// return. lo places every call at the start of its slot of sending, or of
// return, whichever admits fewer. hi places them at the end of their slot
// of sending or of return, whichever admits more, and adds what the
// bucket refills from the last send to the last return, at most the calls
// that returned then: decided that late, the calls still in flight at the
// end could take it. ok is false when t has no slots.
func (t *tally) idealIn(lim bench.Limit, slot time.Duration) (lo, hi int, ok bool) {
	if len(t.sentIn) == 0 || slot <= 0 {
		return 0, 0, false
	}
	lo = min(lim.IdealAdmitsIn(t.sentIn, slot, false), lim.IdealAdmitsIn(t.backIn, slot, false))
	hi = max(lim.IdealAdmitsIn(t.sentIn, slot, true), lim.IdealAdmitsIn(t.backIn, slot, true))
	lastSent, lastBack := lastSlot(t.sentIn), lastSlot(t.backIn)
	if lastBack > lastSent {
		late := 0
		for _, c := range t.backIn[lastSent+1 : lastBack+1] {
			late += int(c)
		}
		refill := int(lim.PerSecondRate() * (time.Duration(lastBack-lastSent) * slot).Seconds())
		hi += min(late, refill)
	}
	return lo, hi, true
}

// lastSlot is the index of the last slot that counted a call; -1 if none.
func lastSlot(slots []uint32) int {
	for i := len(slots) - 1; i >= 0; i-- {
		if slots[i] > 0 {
			return i
		}
	}
	return -1
}

// shiftSlots returns slots moved later by k slots (k >= 0), for adding
// counts whose slot 0 began k slots after another's.
func shiftSlots(slots []uint32, k int) []uint32 {
	if len(slots) == 0 || k <= 0 {
		return slots
	}
	return append(make([]uint32, k), slots...)
}

// paced sends one request every interval on key, from start until d has
// passed (requests late for their slot are sent at once, so the count of
// requests does not depend on scheduling). It returns the tally and when
// each request was sent and returned.
func paced(lim bench.Limiter, key string, interval, d time.Duration) (*tally, *timeline) {
	ctx := context.Background()
	t := new(tally)
	tl := new(timeline)
	start := time.Now()
	for i := 0; ; i++ {
		slot := start.Add(time.Duration(i) * interval)
		if slot.Sub(start) >= d {
			break
		}
		if w := time.Until(slot); w > 0 {
			time.Sleep(w)
		}
		tl.call(t, func() (bool, error) { return lim.Allow(ctx, key) })
	}
	return t, tl
}

// timeline keeps when each of a client's calls was sent and returned. A
// perfect limiter decides each call somewhere in between, so the two give
// the bounds of the ideal.
type timeline struct {
	sent, back []time.Time
}

func (tl *timeline) call(t *tally, f func() (bool, error)) {
	tl.sent = append(tl.sent, time.Now())
	ok, err := f()
	tl.back = append(tl.back, time.Now())
	t.count(ok, err)
}

// slowest returns the longest call, and silence the longest time without a
// reply: between the first send and the first reply, or between two replies.
func (tl *timeline) slowest() (slowest, silence time.Duration) {
	for i := range tl.sent {
		slowest = max(slowest, tl.back[i].Sub(tl.sent[i]))
		prev := tl.sent[0]
		if i > 0 {
			prev = tl.back[i-1]
		}
		silence = max(silence, tl.back[i].Sub(prev))
	}
	return slowest, silence
}

// longestSilence returns the longest run of slots in which no call
// returned, up to the last slot in which one did, as a duration.
func longestSilence(backIn []uint32, slot time.Duration) time.Duration {
	last := len(backIn) - 1
	for last >= 0 && backIn[last] == 0 {
		last--
	}
	run, longest := 0, 0
	for _, c := range backIn[:last+1] {
		if c == 0 {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return time.Duration(longest) * slot
}

// ideal returns what a perfect bucket for lim admits with the calls placed at
// their send times and at their return times, lower first.
func (tl *timeline) ideal(lim bench.Limit) (lo, hi int) {
	a, b := lim.IdealAdmits(tl.sent), lim.IdealAdmits(tl.back)
	return min(a, b), max(a, b)
}
