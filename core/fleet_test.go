package core

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/redistest"
)

// waitFleet polls until every limiter counts want members, or fails after
// a generous deadline: the heartbeats run on real time.
func waitFleet(t *testing.T, want int, lims ...*Limiter) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, l := range lims {
			ok = ok && l.FleetSize() == want
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var got []int
			for _, l := range lims {
				got = append(got, l.FleetSize())
			}
			t.Fatalf("fleet sizes %v, want %d on every instance", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newFleetLimiter returns a limiter of fleet "api" under prefix, with a
// fast heartbeat.
func newFleetLimiter(t *testing.T, addr, prefix string, opts ...Option) *Limiter {
	t.Helper()
	lim := newRedisLimiter(t, addr, append([]Option{WithPrefix(prefix), WithTimeout(time.Second),
		WithFleet(Fleet{Name: "api", Heartbeat: 100 * time.Millisecond})}, opts...)...)
	t.Cleanup(func() { lim.Close() })
	return lim
}

// TestFleetMembership: instances count each other within a few heartbeats
// of starting; one that closes is counted out at the others' next
// heartbeat; one that dies without closing, within three heartbeats.
func TestFleetMembership(t *testing.T) {
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("fleet%d:", time.Now().UnixNano())
	var lims []*Limiter
	for range 3 {
		lims = append(lims, newFleetLimiter(t, srv.Addr(), prefix))
	}
	waitFleet(t, 3, lims...)
	for range 3 { // scale out
		lims = append(lims, newFleetLimiter(t, srv.Addr(), prefix))
	}
	waitFleet(t, 6, lims...)

	// Scale in: two close; the others count them out.
	for _, l := range lims[4:] {
		if err := l.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Fatalf("a second Close: %v", err)
		}
	}
	lims = lims[:4]
	waitFleet(t, 4, lims...)

	// A crash: the heartbeat stops, nobody removes the member.
	crashed := lims[3]
	crashed.fleet.stop()
	<-crashed.fleet.done
	lims = lims[:3]
	waitFleet(t, 3, lims...)
}

// TestFleetFallbackAfterScaleOut: a fleet of 3 scales out to 6, then Redis
// dies. Driven at three times the limit through an uneven balancer, the
// six fallbacks together admit about one limit's worth (burst + rate·t),
// without being told the replica count. A fleet sized by a static
// WithFallbackReplicas(3), as deployed before the scale-out, admits twice
// that. The outage runs on a shared fake clock: one step per millisecond.
func TestFleetFallbackAfterScaleOut(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []Option
		lo, hi float64 // the admitted share of burst + rate·t
	}{
		{"fleet", []Option{WithFleet(Fleet{Name: "api", Heartbeat: 100 * time.Millisecond})}, 0.9, 1.1},
		{"static replicas 3", []Option{WithFallbackReplicas(3)}, 1.8, 2.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			prefix := fmt.Sprintf("fleetout%d:", time.Now().UnixNano())
			var clock atomic.Int64
			clock.Store(time.Now().UnixMicro())
			var lims []*Limiter
			add := func() {
				l := newRedisLimiter(t, srv.Addr(), append([]Option{WithPrefix(prefix), WithTimeout(time.Second),
					WithLogger(quietLogger())}, tc.opts...)...)
				t.Cleanup(func() { l.Close() })
				l.now = func() int64 { return clock.Load() }
				lims = append(lims, l)
			}
			for range 3 {
				add()
			}
			if lims[0].fleet != nil {
				waitFleet(t, 3, lims...)
			}
			for range 3 {
				add()
			}
			if lims[0].fleet != nil {
				waitFleet(t, 6, lims...)
			}
			ctx := context.Background()
			limit := PerSecond(100)
			srv.Kill()

			// 300 requests a second for 10 s, spread 30/20/15/15/10/10.
			bal := []int{30, 20, 15, 15, 10, 10}
			const seconds = 10
			admitted := 0
			credit := make([]int, len(bal))
			for ms := 0; ms < seconds*1000; ms++ {
				for i, w := range bal {
					credit[i] += 3 * w // per mille of 300/s, per millisecond
					for credit[i] >= 100 {
						credit[i] -= 100
						res, err := lims[i].Allow(ctx, "tenant:hot", limit)
						if err != nil {
							t.Fatal(err)
						}
						if !res.Degraded {
							t.Fatalf("a decision with Redis dead was not degraded: %+v", res)
						}
						if res.Allowed {
							admitted++
						}
					}
				}
				clock.Add(1000)
			}
			for _, l := range lims {
				l.Close()
				redisOf(l).Client().(*redis.Client).Close()
			}
			redistest.Drain()
			bound := limit.Burst + limit.Rate*seconds
			ratio := float64(admitted) / float64(bound)
			t.Logf("%s: the fleet of 6 admitted %d during a %d s outage at 3x the limit; burst + rate·t = %d: %.2fx",
				tc.name, admitted, seconds, bound, ratio)
			if ratio < tc.lo || ratio > tc.hi {
				t.Errorf("admitted %.2fx burst + rate·t, want %.1f to %.1f", ratio, tc.lo, tc.hi)
			}
		})
	}
}

// TestFleetOptions: bad fleet settings are refused by name.
func TestFleetOptions(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{WithFleet(Fleet{})}, "Name is 0 bytes"},
		{[]Option{WithFleet(Fleet{Name: strings.Repeat("a", 65)})}, "Name is 65 bytes"},
		{[]Option{WithFleet(Fleet{Name: "a{b}"})}, "contains a brace"},
		{[]Option{WithFleet(Fleet{Name: "api", Heartbeat: time.Millisecond})}, "Heartbeat is 1ms"},
		{[]Option{WithFleet(Fleet{Name: "api"}), WithFailurePolicy(FailOpen)}, "failure policy is fail_open"},
		{[]Option{WithFleet(Fleet{Name: "api"}), WithFallbackLimit(func(l Limit) Limit { return l })}, "WithFallbackLimit"},
	} {
		_, err := NewMemory(tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want an error saying %q", err, tc.want)
		}
	}
}

// quietLogger discards the limiter's log: the tests count, they do not read.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestFleetSizeHoldsThroughRestart: Redis restarts empty while a fleet of
// three runs. The members come back one heartbeat at a time; none counts
// fewer than three meanwhile (before, the first back counted itself alone
// and its fallback took the whole limit), and all count three after.
func TestFleetSizeHoldsThroughRestart(t *testing.T) {
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("fleetrs%d:", time.Now().UnixNano())
	const beat = 200 * time.Millisecond
	var lims []*Limiter
	for range 3 {
		l := newRedisLimiter(t, srv.Addr(), WithPrefix(prefix), WithTimeout(time.Second), WithLogger(quietLogger()),
			WithFleet(Fleet{Name: "api", Heartbeat: beat}))
		t.Cleanup(func() { l.Close() })
		lims = append(lims, l)
	}
	waitFleet(t, 3, lims...)
	srv.Kill()
	time.Sleep(5 * beat) // every entry would have expired
	srv.Restart()
	// Watch through the refill: three heartbeats after each member's
	// return, and some more.
	low := 3
	for end := time.Now().Add(6 * beat); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		for _, l := range lims {
			low = min(low, l.FleetSize())
		}
	}
	if low < 3 {
		t.Errorf("a member counted %d while the fleet of 3 came back after a restart", low)
	}
	waitFleet(t, 3, lims...)
}
