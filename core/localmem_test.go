package core

import (
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Bytes per entry that WithLocalCapacity documents, on 64-bit platforms,
// for a key longer than maxLocalKey, held as its digest: the map's slot and
// its share of the map's tables (measured up to about 130 bytes, with the
// rebuilds of removedOne) plus the value (an 80-byte bucket, a 48-byte
// denial). A key of at most maxLocalKey bytes adds its copy, at most
// maxLocalKey bytes.
const (
	fallbackEntryBytes = 224
	denyEntryBytes     = 192
)

// TestLocalMemoryBytes drives a million distinct keys (a hundred thousand
// under -race) through the fallback store and the deny cache at the
// default capacity, and checks the live heap as it goes: it must stay
// within capacity x the documented bytes per entry, whatever the keys'
// length. Each key is a new allocation that the test drops at once, so any
// copy the maps keep of a key shows up in the heap.
func TestLocalMemoryBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("a million keys of up to 10 KB")
	}
	keys := 1_000_000
	if raceEnabled {
		keys = 100_000
	}
	capacity := defaultOptions().capacity
	for _, tc := range []struct {
		name     string
		keys     int
		keyBytes int
		// perEntry is the bound for one entry in each of the two maps.
		perEntry int64
	}{
		{"digest/10KB", keys, 10 << 10, fallbackEntryBytes + denyEntryBytes},
		// Short keys cost no hashing; fewer of them fill the maps.
		{"verbatim/64B", keys / 4, maxLocalKey, fallbackEntryBytes + denyEntryBytes + 2*maxLocalKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bound := int64(capacity)*tc.perEntry + memSlack
			peak, ns, nc := driveLocalMaps(t, capacity, tc.keys, tc.keyBytes, bound)
			if ns > capacity || nc > capacity {
				t.Fatalf("%d fallback and %d deny-cache entries, capacity %d each", ns, nc, capacity)
			}
			t.Logf("%d keys of %d bytes: %d fallback + %d deny-cache entries, peak %.1f MB live (bound %.1f MB), %.0f bytes per entry",
				tc.keys, tc.keyBytes, ns, nc, float64(peak)/1e6, float64(bound)/1e6, float64(peak)/float64(ns+nc))
		})
	}
}

// memSlack covers what is live besides the maps' entries: the maps'
// shards, the test's goroutines and keys in flight, the hashers' pool,
// runtime bookkeeping.
const memSlack = 8 << 20

// driveLocalMaps puts n keys of keyBytes bytes each, half through a new
// fallback store and half through a new deny cache of the given capacity,
// checking every round of keys that the live heap they add stays within
// bound. It returns the peak and the number of entries each map holds at
// the end.
func driveLocalMaps(t *testing.T, capacity, n, keyBytes int, bound int64) (peak int64, fallback, deny int) {
	t.Helper()
	// round is how many keys each map takes between heap checks: few
	// enough that a map keeping its keys fails at the first check, before
	// it holds gigabytes.
	const round = 10_000
	fill := strings.Repeat("k", keyBytes)
	p, _ := newPlan([]Limit{PerMinute(10)}, nil)
	const now = int64(1_000_000_000)
	// Ten gigabytes of keys go by against a live heap of tens of megabytes;
	// collecting less often saves much of the test's time. The checks
	// collect explicitly, so they see only what is live.
	defer debug.SetGCPercent(debug.SetGCPercent(1000))
	base := liveHeap()
	s := newLocalStore(capacity)
	c := newDenyCache(capacity)
	// drive puts keys from, from+2, ... below end through one map: the
	// even keys through the fallback, the odd ones through the deny cache.
	// Each map still sees n/2 distinct keys, many times its capacity, and
	// every key is hashed once (SHA-256 over the keys is the test's time).
	drive := func(from, end int) {
		for i := from; i < end; i += 2 {
			k := bigKey(i, fill)
			if i%2 == 0 {
				s.take(p.ID, k, now, p.Ticks, 1, 0, 0)
			} else {
				c.put(p.ID, k, now, denial{until: now + 6e7, expires: now + 6e7})
			}
		}
	}
	for from := 0; from < n; from += round {
		// Two goroutines share the round's keys, for the test's time.
		end := min(from+round, n)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); drive(from, end) }()
		go func() { defer wg.Done(); drive(from+1, end) }()
		wg.Wait()
		heap := liveHeap() - base
		peak = max(peak, heap)
		if heap > bound {
			t.Fatalf("after %d keys of %d bytes: %d bytes live for %d fallback and %d deny-cache entries, want at most %d",
				end, keyBytes, heap, s.m.len(), c.m.len(), bound)
		}
	}
	fallback, deny = s.m.len(), c.m.len()
	runtime.KeepAlive(s)
	runtime.KeepAlive(c)
	return peak, fallback, deny
}

// bigKey returns key number i, len(fill) bytes long, in memory of its own.
func bigKey(i int, fill string) string {
	var num [20]byte
	n := strconv.AppendInt(num[:0], int64(i), 10)
	var b strings.Builder
	b.Grow(len(fill))
	b.Write(n)
	b.WriteString(fill[len(n):])
	return b.String()
}

// liveHeap returns the bytes of heap still reachable after a collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestLocalShardChurnBounded inserts millions of distinct keys into one
// full shard. Without its rebuilds the shard's map, holding a constant
// number of entries, grows with every key it has seen.
func TestLocalShardChurnBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("millions of keys")
	}
	n := 3_000_000
	if raceEnabled {
		n = 1_000_000
	}
	// Shards of the default size: their maps span several tables, which
	// is where churn makes them grow.
	capacity := defaultOptions().capacity
	defer debug.SetGCPercent(debug.SetGCPercent(1000))
	base := liveHeap()
	s := newShardedMap(capacity, func(*denial, int64) int64 { return 1 })
	sh := &s.shards[0]
	var num [20]byte
	for i := range n {
		k := localKey{id: 1, key: string(strconv.AppendInt(num[:0], int64(i), 10))}
		s.entry(sh, k, 0, true)
	}
	heap := liveHeap() - base
	// Per entry: the entry and a copy of its key (up to 7 digits, an 8-byte
	// allocation); and the 63 other shards, empty.
	bound := int64(s.perShard)*(denyEntryBytes+8) + 64<<10
	t.Logf("%d keys into one shard: %d entries, %d bytes live (bound %d), %.0f bytes per entry",
		n, len(sh.m), heap, bound, float64(heap)/float64(len(sh.m)))
	if heap > bound {
		t.Fatalf("%d keys into one shard of %d entries: %d bytes live, want at most %d", n, s.perShard, heap, bound)
	}
	runtime.KeepAlive(s)
}

// TestLocalLongKeys: a key longer than maxLocalKey, held as its digest,
// names the same bucket whatever memory it comes in, and never the bucket
// of another key, long or short, or of the same key under another plan.
func TestLocalLongKeys(t *testing.T) {
	long := strings.Repeat("tenant:", 20) // 140 bytes
	p, _ := newPlan([]Limit{PerHour(1)}, nil)
	const now = int64(1_000_000_000)
	s := newLocalStore(1000)
	if d := s.take(p.ID, long, now, p.Ticks, 1, 0, 0); !d.Allowed {
		t.Fatalf("decide(%q) = denied, want allowed (first request)", long)
	}
	for _, tc := range []struct {
		name    string
		id      uint64
		key     string
		allowed bool
	}{
		{"same key, own memory", p.ID, strings.Clone(long), false},
		{"verbatim prefix", p.ID, long[:maxLocalKey], true},
		{"one byte longer", p.ID, long + "x", true},
		{"last byte changed", p.ID, long[:len(long)-1] + "x", true},
		{"the digest marker", p.ID, digestedKey, true},
		{"another plan", p.ID + 1, long, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := s.take(tc.id, tc.key, now, p.Ticks, 1, 0, 0); d.Allowed != tc.allowed {
				t.Errorf("decide(%d, %q) allowed = %v, want %v", tc.id, tc.key, d.Allowed, tc.allowed)
			}
		})
	}
	s.delete(p.ID, strings.Clone(long))
	if d := s.take(p.ID, long, now, p.Ticks, 1, 0, 0); !d.Allowed {
		t.Errorf("decide(%q) after delete = denied, want allowed", long)
	}

	c := newDenyCache(1000)
	c.put(p.ID, long, now, denial{until: now + 10, expires: now + 10})
	if _, st, _ := c.check(p.ID, strings.Clone(long), now); st != denyHit {
		t.Errorf("deny cache check(long key copy) = %v, want a hit", st)
	}
	if _, st, _ := c.check(p.ID, long+"x", now); st != denyMiss {
		t.Errorf("deny cache check(other long key) = %v, want a miss", st)
	}
}

// TestLocalLongKeyNoAlloc: a decision on a known key longer than
// maxLocalKey digests the key without allocating.
func TestLocalLongKeyNoAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled hashers at random")
	}
	s := newLocalStore(1000)
	p, _ := newPlan([]Limit{PerSecond(1_000_000)}, nil)
	now := int64(1_000_000_000)
	key := strings.Repeat("k", 10<<10)
	s.take(p.ID, key, now, p.Ticks, 1, 0, 0)
	allocs := testing.AllocsPerRun(1000, func() {
		now++
		s.take(p.ID, key, now, p.Ticks, 1, 0, 0)
	})
	if allocs != 0 {
		t.Fatalf("local decision on a known 10 KB key: %v allocs, want 0", allocs)
	}
}

// BenchmarkLocalDecideLongKey is BenchmarkLocalDecide with keys just above
// maxLocalKey and of 10 KB: the digest's cost on every lookup.
func BenchmarkLocalDecideLongKey(b *testing.B) {
	for _, n := range []int{maxLocalKey + 1, 10 << 10} {
		b.Run(strconv.Itoa(n)+"B", func(b *testing.B) {
			s := newLocalStore(100_000)
			p, _ := newPlan([]Limit{PerSecond(1 << 30)}, nil)
			now := int64(1_000_000_000)
			key := strings.Repeat("k", n)
			s.take(p.ID, key, now, p.Ticks, 1, 0, 0)
			b.ReportAllocs()
			for b.Loop() {
				now++
				s.take(p.ID, key, now, p.Ticks, 1, 0, 0)
			}
		})
	}
}
