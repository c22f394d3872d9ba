package core

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// TestTopCountsOnce: the top-talkers sketches count each request once,
// whichever layer answers it: the store, the deny cache, or the store
// after the deny cache passed it on (cacheFirst calls decideKey again,
// and only the outermost call counts).
func TestTopCountsOnce(t *testing.T) {
	obs := newRecorder()
	lim, err := New(redistest.NewClient(t, redistest.Start(t).Addr()), WithTopTalkers(TopTalkers{K: 3, Names: true, Window: time.Hour, Flush: time.Hour}),
		WithTimeout(5*time.Second), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	// The engine's clock stands still, so a pause of this process (a
	// loaded host) cannot age the deny cache's entry past its second.
	frozen := time.Now().UnixMicro()
	lim.now = func() int64 { return frozen }
	rule, err := lim.Prepare(Limit{Name: "burst", Rate: 1, Period: time.Hour, Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// alice: five admitted by the store, the last of which left no
	// token (cached), then three denied by the deny cache; then bob,
	// passed on by the deny cache (it holds alice) to the store, twice.
	for _, key := range []string{"alice", "alice", "alice", "alice", "alice", "alice", "alice", "alice", "bob", "bob"} {
		if _, err := rule.Allow(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	obs.mu.Lock()
	n := obs.bySource[SourceDenyCache]
	obs.mu.Unlock()
	if n != 3 {
		t.Fatalf("%d decisions by the deny cache, want 3 (%v)", n, obs.bySource)
	}
	if err := lim.plans.top.flush(ctx); err != nil {
		t.Fatal(err)
	}
	tk, err := lim.Top(ctx, "burst", 3)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := talkersText(tk), "adm alice=5/3 bob=2/0 den alice=5/3 total 7/3 err 0/0"; got != want {
		t.Errorf("Top:\n got %s\nwant %s", got, want)
	}
}
