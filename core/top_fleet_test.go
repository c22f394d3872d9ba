package core

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// TestTopFleet is done-when 1 of issue 50's top talkers: three instances
// (each with its own client) on one real redis-server share 10^5 keys of
// Zipf(1.1) traffic. The 10 s of traffic is driven as fast as the
// machine allows instead: every decision falls in one window (Window 1h,
// so at most one window boundary can pass during the test, and Top reads
// the current window and the one before), and each instance flushes once,
// when it is closed, so what Redis holds is exactly what a 10 s run would
// have flushed by its end.
//
// Each request is decided under two rules: "cost", which admits all
// (costs 1 to 4), so the top by admitted cost is the traffic's own; and
// "deny", a burst of 20 an hour, so every key past its 20th request is
// denied and the top by denials is the heavy keys'. (One rule would tie
// the top by admitted cost: a denied key admits its burst and no more.)
// The true counts are the Results the instances got. Then a fourth
// limiter reads: the true top 10 of each kind are all among the k = 20
// reported, each count within the stated error, the error within
// total/Counters, and no list longer than k. No command of the flush runs
// while deciding.
func TestTopFleet(t *testing.T) {
	srv := redistest.Start(t)
	conf := TopTalkers{K: 20, Counters: 256, Window: time.Hour, Flush: time.Hour}
	requests := 45_000
	if testing.Short() {
		requests = 6_000
	}
	const keys = 100_000
	costLimit := Limit{Name: "cost", Rate: 1 << 30, Period: time.Second, Burst: 1 << 20}
	denyLimit := Limit{Name: "deny", Rate: 1, Period: time.Hour, Burst: 20}

	var (
		mu                 sync.Mutex
		admitted, denied   = map[string]int64{}, map[string]int64{}
		wg                 sync.WaitGroup
		lims               []*Limiter
		ctx                = context.Background()
		totalAdm, totalDen int64
	)
	for i := range 3 {
		// A budget no pause of a busy machine outlasts: a degraded
		// decision would be the fallback's, not the fleet's.
		lim, err := New(redistest.NewClient(t, srv.Addr()), WithTopTalkers(conf), WithTimeout(5*time.Second), WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		lims = append(lims, lim)
		costRule, err1 := lim.Prepare(costLimit)
		denyRule, err2 := lim.Prepare(denyLimit)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 50))
			z := rand.NewZipf(rng, 1.1, 1, keys-1)
			adm, den := map[string]int64{}, map[string]int64{}
			for range requests / 3 {
				key := "tenant:" + strconv.FormatUint(z.Uint64(), 10)
				cost := 1 + rng.IntN(4)
				res, err := costRule.AllowN(ctx, key, cost)
				if err != nil || !res.Allowed || res.Degraded {
					t.Errorf("cost rule: %+v, %v", res, err)
					return
				}
				adm[key] += int64(cost)
				res, err = denyRule.Allow(ctx, key)
				if err != nil || res.Degraded {
					t.Errorf("deny rule: %+v, %v", res, err)
					return
				}
				if !res.Allowed {
					den[key]++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for k, n := range adm {
				admitted[k] += n
				totalAdm += n
			}
			for k, n := range den {
				denied[k] += n
				totalDen += n
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	calls, err := redistest.CommandCalls(ctx, redistest.NewClient(t, srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	if calls["zincrby"] != 0 || calls["hincrby"] != 0 {
		t.Errorf("the flush's commands ran while deciding: %v", calls)
	}
	for _, lim := range lims {
		lim.Close() // the last flush
	}
	waitGone(t, "(*topTalkers).run")

	reader, err := New(redistest.NewClient(t, srv.Addr()), WithTopTalkers(TopTalkers{Window: conf.Window}))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	byCost, err := reader.Top(ctx, "cost", conf.K)
	if err != nil {
		t.Fatal(err)
	}
	byDenial, err := reader.Top(ctx, "deny", conf.K)
	if err != nil {
		t.Fatal(err)
	}
	checkTop(t, "admitted cost", byCost.ByAdmitted, byCost.Admitted, totalAdm, byCost.AdmittedError, admitted, conf,
		func(tk Talker) int64 { return tk.Admitted })
	checkTop(t, "denials", byDenial.ByDenied, byDenial.Denied, totalDen, byDenial.DeniedError, denied, conf,
		func(tk Talker) int64 { return tk.Denied })
	if len(byCost.ByDenied) != 0 || byCost.Denied != 0 {
		t.Errorf("the cost rule denied nothing, but Top reports %d denials", byCost.Denied)
	}
	t.Logf("%d requests; admitted cost %d, error bound %d (total/Counters %d); denials %d, error bound %d",
		requests, byCost.Admitted, byCost.AdmittedError, byCost.Admitted/int64(conf.Counters), byDenial.Denied, byDenial.DeniedError)
	checkTopKeys(t, srv.Addr(), conf.Window)
}

// checkTop checks one kind's reported list against the truth.
func checkTop(t *testing.T, kind string, got []Talker, total, wantTotal, bound int64, truth map[string]int64, conf TopTalkers, count func(Talker) int64) {
	t.Helper()
	if total != wantTotal {
		t.Errorf("%s: total %d, want %d", kind, total, wantTotal)
	}
	if len(got) > conf.K {
		t.Errorf("%s: %d talkers reported, more than k = %d", kind, len(got), conf.K)
	}
	if bound > total/int64(conf.Counters) {
		t.Errorf("%s: error bound %d above the stated total/Counters = %d", kind, bound, total/int64(conf.Counters))
	}
	byHash := map[string]Talker{}
	for _, tk := range got {
		byHash[tk.Hash] = tk
	}
	ranked := slices.SortedFunc(func(yield func(string) bool) {
		for k := range truth {
			if !yield(k) {
				return
			}
		}
	}, func(a, b string) int {
		if truth[a] != truth[b] {
			return int(truth[b] - truth[a])
		}
		return strings.Compare(a, b)
	})
	var report []string
	for i, key := range ranked[:10] {
		tk, ok := byHash[TopKeyHash(key)]
		switch {
		case !ok:
			t.Errorf("%s: the true #%d, %s (%d), is not reported", kind, i+1, key, truth[key])
		case count(tk) < truth[key]-bound || count(tk) > truth[key]+bound:
			t.Errorf("%s: %s counted %d, true %d, beyond the error bound %d", kind, key, count(tk), truth[key], bound)
		}
		report = append(report, fmt.Sprintf("%s=%d/%d", key, truth[key], count(tk)))
	}
	t.Logf("%s, true top 10 (true/reported): %s", kind, strings.Join(report, " "))
}

// checkTopKeys checks that the window's keys carry a TTL of at most three
// windows.
func checkTopKeys(t *testing.T, addr string, window time.Duration) {
	t.Helper()
	rdb := redistest.NewClient(t, addr)
	ctx := context.Background()
	ks, err := rdb.Keys(ctx, "sluice:{top:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) == 0 {
		t.Fatal("no top-talkers key in Redis")
	}
	for _, k := range ks {
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil || ttl <= 0 || ttl > 3*window {
			t.Errorf("%s: TTL %v (%v), want at most %v", k, ttl, err, 3*window)
		}
	}
}
