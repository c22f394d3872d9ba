package core

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/redistest"
)

// TestTopAfterLoss: what Redis forgets of the top-talkers windows (the
// row of docs/topologies.md's table). The windows only report: a loss
// never changes a decision. Evicted window keys (deleted) read as
// nothing, and the counts flushed after start again from zero: an
// undercount of what was lost, never an overcount. A restart without data
// does the same to every window. A value of another type at a window's
// key makes the flush fail (logged once; its counts are lost) and Top
// return an error wrapping ErrUnavailable, until the next window's keys.
func TestTopAfterLoss(t *testing.T) {
	srv := redistest.Start(t)
	log := &testkit.Warnings{}
	lim := newRedisLimiter(t, srv.Addr(), WithTopTalkers(TopTalkers{Window: time.Hour, Flush: time.Hour}), WithLogger(slog.New(log)))
	defer lim.Close()
	rdb := redistest.NewClient(t, srv.Addr())
	ctx := context.Background()
	api := Limit{Name: "api", Rate: 1, Period: time.Hour, Burst: 1000}
	send := func(n int) {
		t.Helper()
		for range n {
			if res, err := lim.Allow(ctx, "tenant:a", api); err != nil || !res.Allowed || res.Degraded {
				t.Fatalf("Allow: %+v, %v", res, err)
			}
		}
		if err := lim.plans.top.flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	admitted := func(when string, want int64) {
		t.Helper()
		top, err := lim.Top(ctx, "api", 1)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if top.Admitted != want || want > 0 && (len(top.ByAdmitted) != 1 || top.ByAdmitted[0].Admitted != want) {
			t.Errorf("%s: %s; want %d admitted", when, talkersText(top), want)
		}
	}
	keys := func() []string {
		t.Helper()
		ks, err := rdb.Keys(ctx, "*{top:*").Result()
		if err != nil || len(ks) == 0 {
			t.Fatalf("the window's keys: %v, %v", ks, err)
		}
		return ks
	}
	send(10)
	admitted("flushed", 10)

	rdb.Del(ctx, keys()...) // evicted
	admitted("evicted", 0)
	send(5)
	admitted("evicted, then 5 more", 5)

	srv.Kill()
	srv.Restart()
	admitted("restarted", 0)
	send(3) // the bucket is fresh too: 3 of 1000
	admitted("restarted, then 3 more", 3)

	for _, k := range keys() {
		if strings.HasSuffix(k, ":a") {
			rdb.Del(ctx, k)
			rdb.Set(ctx, k, "not a sorted set", 0)
		}
	}
	if _, err := lim.Top(ctx, "api", 1); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Top with a string at a window's key: %v; want ErrUnavailable and the server's WRONGTYPE", err)
	}
	for range 2 {
		lim.Allow(ctx, "tenant:a", api)
		if err := lim.plans.top.flush(ctx); err == nil {
			t.Error("a flush onto a string: no error")
		}
	}
	if lines := log.Lines(); len(lines) != 1 || !strings.Contains(lines[0], "top-talkers") {
		t.Errorf("logged %q; want one line about the failed flush", lines)
	}
}
