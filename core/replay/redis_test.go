package replay_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/replay"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
)

// recordedEvents is how many requests TestReplayMatchesRedis records per
// case: 10^5, or 2*10^4 under -short or -race (a busy two-core machine
// takes minutes for 10^5 under the race detector), or
// $SLUICE_REPLAY_EVENTS when set, for the full size anywhere:
//
//	SLUICE_REPLAY_EVENTS=100000 go test -race -run TestReplayMatchesRedis ./core/replay/
func recordedEvents(t *testing.T) int {
	if s := os.Getenv("SLUICE_REPLAY_EVENTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_REPLAY_EVENTS=%q: want a positive count", s)
		}
		return n
	}
	if testing.Short() || raceEnabled {
		return 20_000
	}
	return 100_000
}

// TestReplayMatchesRedis records the requests of a real run (a net/http
// middleware with WithRecord, concurrent clients, a limiter on a real
// Redis with its batching and deny cache on) and replays the recording
// under the same limits: every event must get the decision it got from
// Redis. Limits are tight enough that both decisions are common, and a
// penalty lock makes a denial change the state.
func TestReplayMatchesRedis(t *testing.T) {
	burst := []core.Limit{core.PerSecond(20).WithBurst(5), core.PerMinute(600)}
	cases := []struct {
		name string
		opts func(*replay.Rule) []httplimit.Option
		key  func(r *rand.Rand, req *http.Request)
	}{
		{"key, two limits, penalty", func(rl *replay.Rule) []httplimit.Option {
			rl.Limits, rl.Penalty = burst, 150*time.Millisecond
			return []httplimit.Option{httplimit.WithLimits(burst[1]), httplimit.WithPenalty(rl.Penalty)}
		}, func(r *rand.Rand, req *http.Request) {
			req.Header.Set("X-Tenant", fmt.Sprint("t", r.IntN(150)))
		}},
		{"path of two levels", func(rl *replay.Rule) []httplimit.Option {
			user := []core.Limit{core.PerSecond(8).WithBurst(3)}
			rl.Levels = []core.Level{{Name: "org", Limits: burst}, {Name: "user", Limits: user}}
			return []httplimit.Option{httplimit.WithLimits(burst[1]), httplimit.WithScope("api"),
				httplimit.WithPath("org", policy.PathLevel{Name: "user", Key: keyfunc.Header("X-User"), Limits: user})}
		}, func(r *rand.Rand, req *http.Request) {
			req.Header.Set("X-Tenant", fmt.Sprint("t", r.IntN(40)))
			if r.IntN(5) > 0 {
				req.Header.Set("X-User", fmt.Sprint("u", r.IntN(8)))
			}
		}},
	}
	n := recordedEvents(t)
	rdb := redistest.NewClient(t, redistest.Addr(t))
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lim, err := core.New(rdb, core.WithPrefix(fmt.Sprintf("replaytest:%d:%d:", time.Now().UnixNano(), ci)),
				core.WithTimeout(3*time.Second)) // a busy machine must not push a decision to the fallback
			if err != nil {
				t.Fatal(err)
			}
			defer lim.Close()
			var buf bytes.Buffer
			rec, err := replay.NewRecorder(&buf, 1)
			if err != nil {
				t.Fatal(err)
			}
			var rule replay.Rule
			opts := append(tc.opts(&rule), httplimit.WithRecord(rec),
				httplimit.WithCost(func(r *http.Request) int { n, _ := strconv.Atoi(r.Header.Get("X-Cost")); return max(1, n) }))
			h := httplimit.New(lim, burst[0], keyfunc.Tenant("X-Tenant"), opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			const workers = 16
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(ci), uint64(w)))
					for i := w; i < n; i += workers {
						req := httptest.NewRequest("GET", "/", nil)
						tc.key(r, req)
						if r.IntN(10) == 0 {
							req.Header.Set("X-Cost", "2")
						}
						h.ServeHTTP(httptest.NewRecorder(), req)
					}
				})
			}
			wg.Wait()
			if err := rec.Close(); err != nil {
				t.Fatal(err)
			}
			if st := rec.Stats(); st.Written != int64(n) || st.Dropped != 0 || st.Failed != 0 {
				t.Fatalf("recorder: %+v for %d requests", st, n)
			}
			events, err := replay.Read(&buf, func(b replay.BadLine) { t.Errorf("recorded %v", b) })
			if err != nil {
				t.Fatal(err)
			}
			replay.Sort(events)
			admitted, denied, mismatches := 0, 0, 0
			err = replay.Replay(events, rule, func(i int, res core.Result) {
				ev := &events[i]
				switch ev.Outcome {
				case replay.Admitted:
					admitted++
				case replay.Denied:
					denied++
				default:
					t.Fatalf("event %d has no recorded decision (made without the store?): %+v", i, ev)
				}
				if res.Allowed != (ev.Outcome == replay.Admitted) {
					if mismatches++; mismatches <= 5 {
						t.Errorf("event %d %+v: replayed %+v", i, *ev, res)
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d events, %d admitted, %d denied, %d replayed otherwise", len(events), admitted, denied, mismatches)
			if admitted+denied != n || mismatches != 0 {
				t.Fatalf("%d of %d events replayed, %d with another decision; want all, none", admitted+denied, n, mismatches)
			}
			if admitted < n/100 || denied < n/100 {
				t.Fatalf("%d admitted, %d denied: the limits do not test both decisions", admitted, denied)
			}
		})
	}
}
