package core

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/redisstore"
)

// step is one request applied to a bucket in a model test.
type step struct {
	at      int64 // microseconds since t0
	cost    int64
	maxWait int64
	penalty int64
	want    decision
}

func runSteps(t *testing.T, limits []Limit, steps []step) {
	t.Helper()
	p, err := newPlan(limits, nil)
	if err != nil {
		t.Fatalf("newPlan(%v) = %v", limits, err)
	}
	const t0 = 1_700_000_000_000_000
	var b bucket
	for i, s := range steps {
		got, _ := stepBucket(&b, t0+s.at, p.Ticks, s.cost, s.maxWait, s.penalty)
		next := got.Next
		got.Next = 0
		if got != s.want {
			t.Fatalf("step %d at %dµs: stepBucket(cost %d) = %+v, want %+v", i, s.at, s.cost, got, s.want)
		}
		// next must be what a unit request at the same instant would be
		// told: 0 if it passes, else its RetryAfter.
		probe := bucket{lock: b.lock, tats: append([]tat(nil), b.tats...), set: b.set}
		u, _ := stepBucket(&probe, t0+s.at, p.Ticks, 1, 0, 0)
		if want := map[bool]int64{true: 0, false: u.Retry}[u.Allowed]; next != want {
			t.Fatalf("step %d at %dµs: next = %d, a unit request would wait %d", i, s.at, next, want)
		}
	}
}

func TestDecideSteps(t *testing.T) {
	const s = 1_000_000
	tests := []struct {
		name   string
		limits []Limit
		steps  []step
	}{
		{"burst then refill", []Limit{PerSecond(2)}, []step{
			{0, 1, 0, 0, decision{Allowed: true, Remaining: 1, Reset: s / 2}},
			{0, 1, 0, 0, decision{Allowed: true, Remaining: 0, Reset: s}},
			{0, 1, 0, 0, decision{Remaining: 0, Retry: s / 2, Reset: s}},
			{s/2 - 1, 1, 0, 0, decision{Remaining: 0, Retry: 1, Reset: s/2 + 1}},
			{s / 2, 1, 0, 0, decision{Allowed: true, Remaining: 0, Reset: s}},
			{5 * s, 2, 0, 0, decision{Allowed: true, Remaining: 0, Reset: s}},
		}},
		{"fractional interval keeps remainders", []Limit{{Rate: 3, Period: time.Second, Burst: 3}}, []step{
			// One token every 333333.33µs. After the burst, the TAT moves
			// by exactly 1/3 s per request, fraction kept: 4/3 s, 5/3 s,
			// then exactly 2 s.
			{0, 3, 0, 0, decision{Allowed: true, Remaining: 0, Reset: s}},
			{1, 1, 0, 0, decision{Remaining: 0, Retry: 333333, Reset: 999999}},
			{333334, 1, 0, 0, decision{Allowed: true, Remaining: 0, Reset: s}},
			{666667, 1, 0, 0, decision{Allowed: true, Remaining: 0, Reset: s}},
			{999999, 1, 0, 0, decision{Remaining: 0, Retry: 1, Reset: 666668}},
			{1000000, 1, 0, 0, decision{Allowed: true, Remaining: 0, Reset: s}},
		}},
		{"cost and denial consumes nothing", []Limit{PerSecond(10)}, []step{
			{0, 8, 0, 0, decision{Allowed: true, Remaining: 2, Reset: 800000}},
			{0, 3, 0, 0, decision{Remaining: 2, Retry: 100000, Reset: 800000}},
			{0, 2, 0, 0, decision{Allowed: true, Remaining: 0, Reset: s}},
		}},
		{"two limits, both consumed, tighter decides", []Limit{PerSecond(2), PerMinute(3)}, []step{
			// reset is the deciding limit's: the per-second bucket is full
			// again in half a second, the per-minute one in 20 s.
			{0, 1, 0, 0, decision{Allowed: true, Remaining: 1, Reset: s / 2}},
			{0, 1, 0, 0, decision{Allowed: true, Remaining: 0, Reset: s}},
			{s, 1, 0, 0, decision{Allowed: true, Remaining: 0, Reset: 59 * s, Index: 1}},
			{2 * s, 1, 0, 0, decision{Remaining: 0, Retry: 18 * s, Reset: 58 * s, Index: 1}},
			{20 * s, 1, 0, 0, decision{Allowed: true, Remaining: 0, Reset: 60 * s, Index: 1}},
		}},
		{"remaining and reset are the deciding limit's", []Limit{{Rate: 1, Period: time.Hour, Burst: 5}, PerSecond(10).WithBurst(4)}, []step{
			// Admitted: the per-second limit has fewer tokens left (1 to 2)
			// and decides, with its own reset.
			{0, 3, 0, 0, decision{Allowed: true, Remaining: 1, Reset: 300000, Index: 1}},
			// Both deny; the hourly limit's retry is the longer, so it
			// decides, and its own 2 tokens and 3 h reset are reported.
			{0, 3, 0, 0, decision{Remaining: 2, Retry: 3600 * s, Reset: 3 * 3600 * s}},
			{0, 1, 0, 0, decision{Allowed: true, Remaining: 0, Reset: 400000, Index: 1}},
		}},
		{"penalty lock", []Limit{PerSecond(1)}, []step{
			{0, 1, 0, 10 * s, decision{Allowed: true, Reset: s}},
			{1, 1, 0, 10 * s, decision{Locked: true, Retry: 10 * s, Reset: s - 1}},
			{5 * s, 1, 0, 10 * s, decision{Locked: true, Retry: 5*s + 1}},
			{10*s + 1, 1, 0, 10 * s, decision{Allowed: true, Reset: s}},
		}},
		{"reservation within max wait", []Limit{PerSecond(1)}, []step{
			{0, 1, 0, 0, decision{Allowed: true, Reset: s}},
			{0, 1, 2 * s, 0, decision{Allowed: true, Wait: s, Reset: 2 * s}},
			{0, 1, s, 0, decision{Retry: 2 * s, Reset: 2 * s}},
			{0, 1, 0, 0, decision{Retry: 2 * s, Reset: 2 * s}},
			{2 * s, 1, 0, 0, decision{Allowed: true, Reset: s}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, tt.limits, tt.steps) })
	}
}

func TestLimitValidate(t *testing.T) {
	tests := []struct {
		name  string
		limit Limit
		ok    bool
	}{
		{"per second", PerSecond(10), true},
		{"per hour", PerHour(100), true},
		{"a million a day", Limit{Rate: 1_000_000, Period: 24 * time.Hour, Burst: 1_000_000}, true},
		{"zero value", Limit{}, false},
		{"zero rate", Limit{Rate: 0, Period: time.Second, Burst: 1}, false},
		{"negative rate", Limit{Rate: -1, Period: time.Second, Burst: 1}, false},
		{"zero burst", Limit{Rate: 1, Period: time.Second}, false},
		{"negative period", Limit{Rate: 1, Period: -time.Second, Burst: 1}, false},
		{"sub-microsecond period", Limit{Rate: 1, Period: 999 * time.Nanosecond, Burst: 1}, false},
		{"fractional microseconds", Limit{Rate: 1, Period: 1500 * time.Nanosecond, Burst: 1}, false},
		{"too large to count exactly", Limit{Rate: 7, Period: 1000 * 24 * time.Hour, Burst: 1 << 30}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limit.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("%v.Validate() = %v, want ok=%v", tt.limit, err, tt.ok)
			}
		})
	}
}

func TestRedisKeyLayout(t *testing.T) {
	long := string(make([]byte, 10_000))
	tests := []struct {
		name, key string
	}{
		{"plain", "tenant:acme"},
		{"braces", "}{evil}{"},
		{"empty tag", "{}"},
		{"long", long},
		{"binary", "\x00\xff{\n}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := redisstore.RedisKey("sluice:", "abcdef012345", tt.key)
			if len(k) > len("sluice:")+6+12+1+redisstore.MaxVerbatimKey {
				t.Fatalf("redisKey(%.20q) has %d bytes", tt.key, len(k))
			}
			// The first {...} must be our four-hex-digit tag.
			if k[len("sluice:")] != '{' || k[len("sluice:")+5] != '}' {
				t.Fatalf("redisKey(%.20q) = %.40q: tag not first", tt.key, k)
			}
		})
	}
	if redisstore.RedisKey("p:", "f", "a") == redisstore.RedisKey("p:", "f", "b") {
		t.Fatal("distinct keys share a name")
	}
	// A key shaped like another key's digest form is not stored as that
	// form: it is digested itself.
	stored := redisstore.RedisKey("p:", "f", long)
	digestForm := stored[strings.Index(stored, ":#")+1:]
	if got := redisstore.RedisKey("p:", "f", digestForm); strings.HasSuffix(got, ":"+digestForm) {
		t.Fatalf("the key %q is stored verbatim as %q, the name of a long key's digest", digestForm, got)
	}
}

// TestSlotKey: with WithSlotKey the tag is a keyed hash, the same for the
// same secret and another for another secret, and the rest of the name is
// unchanged; a short secret is refused.
func TestSlotKey(t *testing.T) {
	secret := []byte("0123456789abcdef-fleet-secret")
	a, err := New(redis.NewClient(&redis.Options{}), WithSlotKey(secret))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(redis.NewClient(&redis.Options{}), WithSlotKey(append([]byte{}, secret...)))
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(redis.NewClient(&redis.Options{}), WithSlotKey([]byte("another secret, 16+ bytes")))
	if err != nil {
		t.Fatal(err)
	}
	differ := 0
	for i := range 64 {
		k := fmt.Sprintf("ip:203.0.113.%d", i)
		ka, kb, ko, plain := redisOf(a).RKey("f", k), redisOf(b).RKey("f", k), redisOf(other).RKey("f", k), redisstore.RedisKey("sluice:", "f", k)
		if ka != kb {
			t.Fatalf("one secret, two names: %q and %q", ka, kb)
		}
		if ka[len("sluice:")+6:] != plain[len("sluice:")+6:] {
			t.Fatalf("the keyed name %q differs from %q beyond the tag", ka, plain)
		}
		if ka != ko {
			differ++
		}
	}
	if differ < 60 {
		t.Errorf("two secrets gave the same tag for %d of 64 keys", 64-differ)
	}
	if _, err := New(redis.NewClient(&redis.Options{}), WithSlotKey([]byte("short"))); err == nil || !strings.Contains(err.Error(), "WithSlotKey") {
		t.Errorf("New with a 5-byte slot key = %v, want an error naming WithSlotKey", err)
	}
}
