package outbound

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

type events struct {
	mu  sync.Mutex
	evs []Event
}

func (e *events) ObserveOutbound(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

// TestObserver: a pause the upstream asks for, a call that waits it out
// and one refused are told to the observer and counted, with the budget's
// name and the upstream as their cause.
func TestObserver(t *testing.T) {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	obs := &events{}
	b, err := New(lim, core.PerSecond(100), WithName("api"), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	if d, err := b.Learn(ctx, "k", http.StatusTooManyRequests, header("Retry-After", "1")); err != nil || d != time.Second {
		t.Fatalf("Learn = %v, %v; want a pause of 1s", d, err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := b.Take(short, "k"); err == nil {
		t.Fatal("Take within a 100 ms deadline under a 1 s pause admitted")
	}
	if err := b.Take(ctx, "k"); err != nil { // waits out the pause
		t.Fatal(err)
	}
	want := []EventKind{Paused, Refused, Waited}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.evs) != len(want) {
		t.Fatalf("events %+v, want kinds %v", obs.evs, want)
	}
	for i, ev := range obs.evs {
		if ev.Kind != want[i] || ev.Name != "api" || !ev.ByUpstream || ev.Wait <= 0 {
			t.Errorf("event %d: %+v, want %v for api, by the upstream, with its wait", i, ev, want[i])
		}
	}
	if st := b.Stats(); st != (Stats{Sent: 1, Waited: 1, Refused: 1, Paused: 1}) {
		t.Errorf("Stats() = %+v", st)
	}
}
