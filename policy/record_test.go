package policy

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/replay"
	"github.com/sluicehq/sluice/keyfunc"
)

// fakeRecorder samples the keys without "skip" and keeps
// what it is given.
type fakeRecorder struct {
	mu     sync.Mutex
	events []replay.Event
}

func (r *fakeRecorder) Sampled(key string) bool { return !strings.Contains(key, "skip") }
func (r *fakeRecorder) Record(ev replay.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

// TestWithRecord checks what a middleware records: each decision of a
// sampled key with the instant the engine gave it, its cost and
// outcome, a denial's 429, and, under WithChargeIf, the response's status
// once it settles.
func TestWithRecord(t *testing.T) {
	ctx := context.Background()
	get := func(key string) fakeReq { return fakeReq{headers: map[string]string{"X-Key": key}} }
	t.Run("keys", func(t *testing.T) {
		rec := &fakeRecorder{}
		p := newTestPolicy(t, core.PerMinute(2), keyfunc.Header("X-Key"), WithRecord[req, struct{}](rec),
			WithCost[req, struct{}](func(r req) int { return len(r.Header("X-Key"))%2 + 1 }))
		var verdicts []Verdict
		for _, k := range []string{"ab", "ab", "skip", "abc"} {
			verdicts = append(verdicts, p.Decide(ctx, get(k)))
		}
		want := []replay.Event{
			{Key: "header:x-key:ab", Cost: 1, Outcome: replay.Admitted},
			{Key: "header:x-key:ab", Cost: 1, Outcome: replay.Admitted},
			{Key: "header:x-key:abc", Cost: 2, Outcome: replay.Admitted},
		}
		if len(rec.events) != len(want) {
			t.Fatalf("recorded %+v, want %+v", rec.events, want)
		}
		for i, w := range []int{0, 1, 3} {
			got := rec.events[i]
			if !got.Time.Equal(verdicts[w].Result.Time) || got.Time.IsZero() {
				t.Fatalf("event %d at %v, its decision at %v", i, got.Time, verdicts[w].Result.Time)
			}
			got.Time = want[i].Time
			if !reflect.DeepEqual(got, want[i]) {
				t.Fatalf("event %d = %+v, want %+v", i, got, want[i])
			}
		}
		p.Decide(ctx, get("ab"))
		if last := rec.events[len(rec.events)-1]; last.Outcome != replay.Denied || last.Status != 429 {
			t.Fatalf("a denial recorded as %+v, want denied with 429", last)
		}
	})
	t.Run("charge by status", func(t *testing.T) {
		rec := &fakeRecorder{}
		p := newTestPolicy(t, core.PerMinute(5), keyfunc.Header("X-Key"), WithRecord[req, struct{}](rec),
			WithChargeIf[req, struct{}](func(status int) bool { return status >= 500 }))
		v := p.Decide(ctx, get("k"))
		if len(rec.events) != 0 {
			t.Fatalf("recorded %+v before the response settled", rec.events)
		}
		v.Settle(get("k"), Response{Status: 404})
		if len(rec.events) != 1 || rec.events[0].Status != 404 || rec.events[0].Outcome != replay.Admitted {
			t.Fatalf("recorded %+v, want the admission with status 404", rec.events)
		}
	})
	t.Run("path", func(t *testing.T) {
		rec := &fakeRecorder{}
		p := newTestPolicy(t, core.PerMinute(5), keyfunc.Header("X-Key"), WithRecord[req, struct{}](rec), WithScope[req, struct{}]("api"),
			WithPath[req, struct{}]("org", PathLevel{Name: "user", Key: keyfunc.Header("X-User"), Limits: []core.Limit{core.PerMinute(1)}}))
		p.Decide(ctx, fakeReq{headers: map[string]string{"X-Key": "acme", "X-User": "alice"}})
		p.Decide(ctx, fakeReq{headers: map[string]string{"X-Key": "skipme", "X-User": "bob"}})
		if len(rec.events) != 1 || !reflect.DeepEqual(rec.events[0].Path, []string{"header:x-key:acme", "header:x-user:alice"}) || rec.events[0].Key != "" {
			t.Fatalf("recorded %+v, want acme/alice's path alone", rec.events)
		}
	})
}
