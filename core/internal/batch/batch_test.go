package batch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/leakcheck"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }

// TestFormSplitsQueue checks how leaders share a queue: with other slots
// free, each takes an even part and wakes the next queued caller to lead on
// a slot of its own; with none free, the leader takes the whole queue (up
// to maxBatch). A queued caller whose deadline has passed is turned away
// with an error, never put in a batch.
func TestFormSplitsQueue(t *testing.T) {
	type M = Member[int, int]
	newBatcher := func(inflight, maxBatch int) *Batcher[int, int] {
		return New(func(context.Context, []*M) {}, Config{MaxInflight: inflight, MaxBatch: maxBatch})
	}
	newMember := func(b *Batcher[int, int]) *M { return b.pool.Get().(*M) }
	woken := func(all []*M) *M {
		var got *M
		for _, m := range all {
			select {
			case <-m.done:
				if got != nil || !m.lead || !m.taken {
					t.Fatalf("woken: %+v (already woken: %v)", m, got != nil)
				}
				got = m
			default:
			}
		}
		return got
	}

	t.Run("split", func(t *testing.T) {
		b := newBatcher(4, 256)
		b.inflight, b.forming = 1, 1 // as Do leaves them for a fresh leader
		leader := newMember(b)
		all := []*M{leader}
		expired := newMember(b)
		expired.deadline = time.Now().Add(-time.Second)
		for i := range 9 {
			if i == 2 {
				b.queue = append(b.queue, expired)
			}
			m := newMember(b)
			b.queue = append(b.queue, m)
			all = append(all, m)
		}
		var sizes []int
		for l := leader; l != nil; l = woken(all) {
			batch := b.form(l)
			if slices.Contains(batch, expired) {
				t.Fatal("an expired caller was put in a batch")
			}
			sizes = append(sizes, len(batch))
		}
		// 10 live callers over 4 slots: ceil(10/4) (the expired caller is
		// turned away), then ceil(7/3), ceil(4/2), and the last two
		// together once no slot is free.
		if !slices.Equal(sizes, []int{3, 3, 2, 2}) {
			t.Errorf("batch sizes %v, want [3 3 2 2]", sizes)
		}
		if b.inflight != 4 || b.forming != 0 || len(b.queue) != 0 {
			t.Errorf("inflight %d, forming %d, queue %d; want 4, 0, 0", b.inflight, b.forming, len(b.queue))
		}
		if len(expired.done) != 1 || !errors.Is(expired.Err, context.DeadlineExceeded) || !expired.taken {
			t.Errorf("expired caller: woken %v, err %v, taken %v; want woken with DeadlineExceeded",
				len(expired.done) == 1, expired.Err, expired.taken)
		}
		for range 4 {
			b.finish()
		}
		if b.inflight != 0 || woken(all) != nil {
			t.Errorf("after the round trips: inflight %d, or a caller was woken to lead", b.inflight)
		}
	})

	t.Run("yield only with company", func(t *testing.T) {
		b := newBatcher(4, 256)
		b.inflight, b.forming = 1, 1
		if batch := b.form(newMember(b)); len(batch) != 1 || b.busy {
			t.Fatalf("a lone caller: batch %d, busy %v; want 1, false", len(batch), b.busy)
		}
		// Two callers on four slots: the other's batch is in flight, but
		// a third caller would find a slot free, not queue.
		b.inflight, b.forming = 2, 1
		if batch := b.form(newMember(b)); len(batch) != 1 || b.busy {
			t.Fatalf("alone beside another batch, slots free: batch %d, busy %v; want 1, false", len(batch), b.busy)
		}
		// Every slot taken: the next caller would queue.
		b.inflight, b.forming = 4, 1
		if batch := b.form(newMember(b)); len(batch) != 1 || !b.busy {
			t.Fatalf("alone with every slot taken: batch %d, busy %v; want 1, true", len(batch), b.busy)
		}
		b.inflight = 1
		b.finish()
		b.inflight, b.forming = 1, 1
		b.queue = []*M{newMember(b)}
		if batch := b.form(newMember(b)); len(batch) != 1 || !b.busy {
			// The queued caller leads its own batch on a free slot.
			t.Fatalf("with a queued caller: batch %d, busy %v; want 1, true", len(batch), b.busy)
		}
	})

	t.Run("expired at finish", func(t *testing.T) {
		b := newBatcher(1, 256)
		b.inflight = 1
		expired, live := newMember(b), newMember(b)
		expired.deadline = time.Now().Add(-time.Millisecond)
		b.queue = []*M{expired, live}
		b.finish()
		if !errors.Is(expired.Err, context.DeadlineExceeded) || len(expired.done) != 1 {
			t.Errorf("expired caller not turned away: err %v", expired.Err)
		}
		if !live.lead || len(live.done) != 1 || b.inflight != 1 || len(b.queue) != 0 {
			t.Errorf("live caller: lead %v, woken %v; inflight %d, queue %d", live.lead, len(live.done) == 1, b.inflight, len(b.queue))
		}
	})

	t.Run("no free slot", func(t *testing.T) {
		b := newBatcher(1, 4)
		b.inflight, b.forming = 1, 1
		leader := newMember(b)
		for range 5 {
			b.queue = append(b.queue, newMember(b))
		}
		if batch := b.form(leader); len(batch) != 4 {
			t.Errorf("batch of %d, want maxBatch 4", len(batch))
		}
		if len(b.queue) != 2 {
			t.Fatalf("queue %d, want 2", len(b.queue))
		}
		next := b.queue[0]
		b.finish() // the slot goes to the first queued caller
		if b.inflight != 1 || len(b.queue) != 1 || !next.lead || len(next.done) != 1 {
			t.Errorf("after finish: inflight %d, queue %d, next leads %v and woken %v; want 1, 1, true, true",
				b.inflight, len(b.queue), next.lead, len(next.done) == 1)
		}
	})
}

// TestLeaderLeaves: a batch runs under its own budget, not under its
// leader's context. A leader whose context ends while its batch is in
// flight leaves at once with its own error, and the rest of the batch get
// their answers when the store answers.
func TestLeaderLeaves(t *testing.T) {
	for _, how := range []string{"deadline", "cancel"} {
		t.Run(how, func(t *testing.T) {
			gate := make(chan struct{})
			inSecond := make(chan struct{})
			var sends atomic.Int32
			send := func(ctx context.Context, batch []*Member[int, int]) {
				switch sends.Add(1) {
				case 1:
					<-gate
				case 2:
					close(inSecond)
					<-gate
				}
				if err := ctx.Err(); err != nil {
					t.Errorf("batch %d ran under a context that ended: %v", sends.Load(), err)
				}
				for _, m := range batch {
					m.Res = m.Req * 10
				}
			}
			b := New(send, Config{Budget: time.Minute, MaxInflight: 1, MaxBatch: 256})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); b.Do(context.Background(), 1) }()
			waitFor(t, func() bool { return sends.Load() == 1 })

			// The impatient caller queues first and so leads the next
			// batch, with eight patient callers behind it.
			ctx, cancel := context.WithCancel(context.Background())
			if how == "deadline" {
				ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
			}
			defer cancel()
			impDone := make(chan error, 1)
			go func() { _, _, err := b.Do(ctx, 2); impDone <- err }()
			waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 1 })
			patient := make([]int, 8)
			errs := make([]error, 8)
			for i := range patient {
				wg.Add(1)
				go func() { defer wg.Done(); patient[i], _, errs[i] = b.Do(context.Background(), 100+i) }()
			}
			waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 9 })
			gate <- struct{}{} // the first batch ends; the impatient caller leads the rest
			<-inSecond
			cancel()
			select {
			case err := <-impDone:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("impatient leader: %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the impatient leader did not leave while its batch was in flight")
			}
			close(gate)
			wg.Wait()
			for i := range patient {
				if errs[i] != nil || patient[i] != (100+i)*10 {
					t.Errorf("patient caller %d: %d, %v", i, patient[i], errs[i])
				}
			}
		})
	}
}

// TestChosenLeaderLeaves: a queued caller chosen to lead whose context
// has ended hands the slot on (or, if it sees the wake-up first, sends its
// request under its ended context and gets that context's error), and the
// caller behind it is still served.
func TestChosenLeaderLeaves(t *testing.T) {
	send := func(ctx context.Context, batch []*Member[int, int]) {
		for _, m := range batch {
			m.Res, m.Err = m.Req, ctx.Err()
		}
	}
	b := New(send, Config{MaxInflight: 1, MaxBatch: 1}) // batches of one: every queued caller leads
	b.inflight = 1                                      // a batch in flight holds the only slot
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var leaverErr error
	wg.Add(1)
	go func() { defer wg.Done(); _, _, leaverErr = b.Do(ctx, 1) }()
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 1 })
	var after int
	var afterErr error
	wg.Add(1)
	go func() { defer wg.Done(); after, _, afterErr = b.Do(context.Background(), 2) }()
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 2 })
	// The batch in flight ends and makes the first queued caller its
	// successor; that caller has given up meanwhile.
	b.mu.Lock()
	var late []*Member[int, int]
	b.inflight--
	next := b.nextLeader(time.Now(), true, &late)
	b.mu.Unlock()
	cancel()
	b.wake(next, late)
	wg.Wait()
	if !errors.Is(leaverErr, context.Canceled) {
		t.Errorf("leaver: %v, want context.Canceled", leaverErr)
	}
	if afterErr != nil || after != 2 {
		t.Errorf("caller behind the leaver: %d, %v", after, afterErr)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inflight != 0 || b.forming != 0 || len(b.queue) != 0 {
		t.Errorf("after: inflight %d, forming %d, queue %d; want all 0", b.inflight, b.forming, len(b.queue))
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// errNode is a store failure the fake store injects.
var errNode = errors.New("fake store: node failed")

// slack is how long past its own deadline a caller may return in the
// stress test: the time to notice the deadline and be scheduled, on a
// loaded two-core machine under the race detector.
const slack = 250 * time.Millisecond

// TestStress drives a batcher with random deadlines, cancellations,
// latencies and node failures under -race, and checks the contract:
//   - every caller returns exactly once;
//   - a caller with a deadline returns within its deadline plus slack;
//   - a caller gets a store error only if its batch really failed (the
//     fake store failed it, or its I/O outran the budget), never because
//     of another member's deadline; its context's error only if its
//     context really ended;
//   - an answer is the answer to its own request;
//   - at most maxInflight batches are in flight, none above maxBatch, and
//     no request is sent twice;
//   - afterwards the batcher is idle and no goroutine is left (leakcheck).
func TestStress(t *testing.T) {
	for _, tc := range []struct {
		inflight, maxBatch int
		budget             time.Duration
		timerless          bool
	}{
		{4, 256, 40 * time.Millisecond, false},
		{4, 256, 40 * time.Millisecond, true},
		{1, 8, 40 * time.Millisecond, false},
		{2, 3, 0, false},
	} {
		t.Run(fmt.Sprintf("inflight=%d,max=%d,budget=%v,timerless=%v", tc.inflight, tc.maxBatch, tc.budget, tc.timerless), func(t *testing.T) {
			stress(t, tc.inflight, tc.maxBatch, tc.budget, tc.timerless, 2500)
		})
	}
}

type outcome struct {
	id       int
	res      int
	err      error
	deadline time.Time
	canceled bool
	took     time.Duration
	start    time.Time
}

func stress(t *testing.T, inflight, maxBatch int, budget time.Duration, timerless bool, n int) {
	var inFlight, maxSeen atomic.Int32
	var sentMu sync.Mutex
	sent := map[int]bool{}
	var failed sync.Map // request id -> true: its batch was failed by the store
	var batchSeq atomic.Int64
	send := func(ctx context.Context, batch []*Member[int, int]) {
		if v := inFlight.Add(1); v > maxSeen.Load() {
			maxSeen.Store(v)
		}
		defer inFlight.Add(-1)
		if len(batch) > maxBatch {
			t.Errorf("batch of %d > maxBatch %d", len(batch), maxBatch)
		}
		sentMu.Lock()
		for _, m := range batch {
			if sent[m.Req] {
				t.Errorf("request %d sent twice", m.Req)
			}
			sent[m.Req] = true
		}
		sentMu.Unlock()
		r := rand.New(rand.NewPCG(uint64(batchSeq.Add(1)), 7))
		latency := time.Duration(r.Int64N(int64(3 * time.Millisecond)))
		fail := r.IntN(10) == 0
		// Like a socket, the fake store gives up at ctx's deadline (a
		// timerless context never closes Done at it), or when ctx ends.
		wait, expire := latency, false
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < latency {
			wait, expire = max(0, time.Until(dl)), true
		}
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			expire = true
		}
		if expire {
			for _, m := range batch {
				failed.Store(m.Req, true)
				m.Err = context.DeadlineExceeded
				if err := ctx.Err(); err != nil {
					m.Err = err
				}
			}
			return
		}
		for _, m := range batch {
			if fail {
				failed.Store(m.Req, true)
				m.Err = errNode
				continue
			}
			m.Res = m.Req*2 + 1
		}
	}
	b := New(send, Config{Budget: budget, MaxInflight: inflight, MaxBatch: maxBatch, Timerless: timerless})
	out := make([]outcome, n)
	var wg sync.WaitGroup
	var returned atomic.Int32
	sem := make(chan struct{}, 48) // callers at once
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r := rand.New(rand.NewPCG(uint64(i), 11))
			ctx := context.Background()
			o := outcome{id: i, start: time.Now()}
			kind := r.IntN(4)
			switch kind {
			case 0: // 1-3ms deadline: often shorter than the store's latency
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Millisecond+time.Duration(r.Int64N(int64(2*time.Millisecond))))
				defer cancel()
				o.deadline, _ = ctx.Deadline()
			case 1: // cancelled at a random moment
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				go func() {
					time.Sleep(time.Duration(r.Int64N(int64(4 * time.Millisecond))))
					cancel()
				}()
				o.canceled = true
			}
			if kind == 3 && b.Alone() {
				// Alone, as the store sends a lone decision on an
				// idle batcher: under the budget, then Done.
				m := &Member[int, int]{Req: i}
				sctx, cancel := ctx, context.CancelFunc(func() {})
				if budget > 0 {
					sctx, cancel = context.WithTimeout(ctx, budget)
				}
				send(sctx, []*Member[int, int]{m})
				cancel()
				b.Done()
				o.res, o.err = m.Res, m.Err
			} else {
				o.res, _, o.err = b.Do(ctx, i)
			}
			o.took = time.Since(o.start)
			returned.Add(1)
			out[i] = o
		}()
	}
	wg.Wait()
	if int(returned.Load()) != n {
		t.Fatalf("%d of %d callers returned", returned.Load(), n)
	}
	var answered, ctxErrs, storeErrs, worstOver int
	var worst time.Duration
	for _, o := range out {
		switch {
		case o.err == nil:
			answered++
			if o.res != o.id*2+1 {
				t.Errorf("caller %d got %d, the answer to another request", o.id, o.res)
			}
		case errors.Is(o.err, context.DeadlineExceeded) && !o.deadline.IsZero() && !o.start.Add(o.took).Before(o.deadline):
			ctxErrs++
		case errors.Is(o.err, context.Canceled) && o.canceled:
			ctxErrs++
		case errors.Is(o.err, errNode):
			storeErrs++
			if _, ok := failed.Load(o.id); !ok {
				t.Errorf("caller %d got a store error but its batch was answered", o.id)
			}
		case errors.Is(o.err, context.DeadlineExceeded) && budget > 0:
			// The batch outran the budget: a store failure, and
			// only if the fake store really did fail it.
			storeErrs++
			if _, ok := failed.Load(o.id); !ok {
				t.Errorf("caller %d got %v but its batch was answered", o.id, o.err)
			}
		default:
			t.Errorf("caller %d (deadline %v, canceled %v): unexpected %v after %v", o.id, !o.deadline.IsZero(), o.canceled, o.err, o.took)
		}
		if !o.deadline.IsZero() {
			if over := o.start.Add(o.took).Sub(o.deadline); over > worst {
				worst = over
			}
			if o.start.Add(o.took).After(o.deadline.Add(slack)) {
				worstOver++
			}
		}
	}
	if worstOver > 0 {
		t.Errorf("%d callers returned more than %v after their deadline (worst %v)", worstOver, slack, worst)
	}
	if int(maxSeen.Load()) > inflight {
		t.Errorf("%d batches in flight at once, more than %d", maxSeen.Load(), inflight)
	}
	// Every caller has returned, but a batch whose members all left may
	// still be in flight in its own goroutine: it frees its slot when its
	// I/O ends, within the budget (or the fake store's latency).
	quiet := func() (inflight, forming, queued int, ok bool) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.inflight, b.forming, len(b.queue), b.inflight == 0 && b.forming == 0 && len(b.queue) == 0 && b.door.Load() != doorHeld
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		i, f, q, ok := quiet()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("10s after the last caller: inflight %d, forming %d, queue %d; want all 0", i, f, q)
			break
		}
	}
	// And no goroutine of the batcher (or of the callers' cancellers) is.
	if err := leakcheck.Check(); err != nil {
		t.Error(err)
	}
	t.Logf("%d callers: %d answered, %d left with their own context's error, %d store errors; latest return %v after a deadline",
		n, answered, ctxErrs, storeErrs, worst)
}

// TestAloneDoor: on an idle batcher Alone takes the slot through the door
// (one compare-and-swap) and Done gives it back there; a caller that
// comes while the slot is held that way shuts the door and finds the slot
// taken, as it would had Alone taken the mutex; the holder's Done then
// frees it through finish, and the idle batcher opens the door again. With
// one slot the door never opens (Alone must mark the batcher busy).
func TestAloneDoor(t *testing.T) {
	send := func(ctx context.Context, batch []*Member[int, int]) {
		for _, m := range batch {
			m.Res = m.Req + 1
		}
	}
	b := New(send, Config{MaxInflight: 3, MaxBatch: 8})
	state := func(b *Batcher[int, int]) (door int32, inflight int) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.door.Load(), b.inflight
	}
	check := func(b *Batcher[int, int], when string, door int32, inflight int) {
		t.Helper()
		if d, n := state(b); d != door || n != inflight {
			t.Fatalf("%s: door %d, inflight %d; want %d, %d", when, d, n, door, inflight)
		}
	}
	check(b, "new batcher", doorOpen, 0)
	for range 3 {
		if !b.Alone() {
			t.Fatal("Alone on an idle batcher = false")
		}
		check(b, "after Alone on an idle batcher (held through the door)", doorHeld, 0)
		b.Done()
		check(b, "after Done", doorOpen, 0)
	}

	// A second Alone while the first holds the slot through the door:
	// it shuts the door, counts the held slot, and takes another.
	if first, second := b.Alone(), b.Alone(); !first || !second {
		t.Fatal("two Alones on three free slots: want both")
	}
	check(b, "two slots held", doorShut, 2)
	b.Done()
	check(b, "after one Done", doorShut, 1)
	b.Done()
	check(b, "after both Dones", doorOpen, 0)

	// Do while a slot is held through the door: it leads on another.
	if !b.Alone() {
		t.Fatal("Alone on an idle batcher = false")
	}
	if res, _, err := b.Do(context.Background(), 41); err != nil || res != 42 {
		t.Fatalf("Do beside a held slot = %d, %v; want 42, nil", res, err)
	}
	check(b, "after Do beside a held slot", doorShut, 1)
	b.Done()
	check(b, "after Done", doorOpen, 0)

	// Every slot taken makes the batcher busy (worth yielding for):
	// Alone refuses and the door stays shut until a batch forms alone.
	two := New(send, Config{MaxInflight: 2, MaxBatch: 8})
	if first, second, third := two.Alone(), two.Alone(), two.Alone(); !first || !second || third {
		t.Fatal("Alone on two slots: want two taken, the third refused")
	}
	two.Done()
	two.Done()
	check(two, "after both Dones, busy", doorShut, 0)
	if two.Alone() {
		t.Fatal("Alone while busy = true")
	}
	if res, _, err := two.Do(context.Background(), 1); err != nil || res != 2 {
		t.Fatalf("Do = %d, %v; want 2, nil", res, err)
	}
	check(two, "after a batch alone", doorOpen, 0)

	// With one slot the door never opens: Alone must mark it busy.
	one := New(send, Config{MaxInflight: 1, MaxBatch: 8})
	check(one, "new batcher of one slot", doorShut, 0)
	if !one.Alone() || one.Alone() {
		t.Fatal("Alone on one slot: want it taken, the second refused")
	}
	one.Done()
}
