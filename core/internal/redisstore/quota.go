package redisstore

import (
	"strconv"
	"sync"
)

// A quota across a loss of Redis's data. A key with stepped limits (an
// interval or a calendar quota) counts a window that may be a month long:
// Redis forgetting it would hand out one more window. So each store
// remembers, for every stepped key it decided, what it admitted itself in
// each limit's current window, and the epoch of the key's tag it last
// read; every call of such a key brings both (the quota section of
// bucket.lua's and path.lua's arguments), and after a loss the script adds
// the count back to the key's debt and holds the tag in a grace period
// while the other replicas do the same (see quota.lua). Across a loss the
// window then admits at most its quota plus what replicas that did not
// call the key within the grace period (those that died) had admitted.

// maxQuotaKeys bounds the stepped keys a store remembers. Past it, records
// whose windows have all ended are dropped (at most once a second); if
// none has, a key met for the first time is not remembered, and its count
// is not re-asserted after a loss. A record is its stored name and 24
// bytes per limit, about 200 bytes: 13 MB at most.
const maxQuotaKeys = 1 << 16

// quotaBook is what a store remembers of the stepped keys it decided.
// Safe for concurrent use; its lock is never held across I/O.
type quotaBook struct {
	mu    sync.Mutex
	keys  map[string]*quotaRecord // a stepped key's stored name -> its record
	tags  map[string]int64        // a tag's epoch key -> the epoch a stepped call last read (not the caps': see seen)
	swept int64                   // the limiter's microsecond of the last sweep of ended records
}

// quotaRecord is what this store admitted in one stepped key: per limit of
// its plan (zero for a continuous one), the window counted and the events
// admitted in it; the tag's epoch when it was last decided; and until when
// its windows last (the limiter's clock, microseconds).
type quotaRecord struct {
	epoch int64
	until int64
	wins  []quotaCount
}

// quotaCount is the events admitted under one limit in window idx.
type quotaCount struct{ idx, n int64 }

// quotaEntry is one key's entry of a call's quota section: its tag's
// epoch key, the epoch known (0: none), and the counts (limit, 1-based;
// window; count), flattened.
type quotaEntry struct {
	ekey   string
	known  int64
	counts []int64
}

// entry returns the quota entry of a call of stepped key rkey under p.
func (b *quotaBook) entry(rkey, ekey string, p *plan) *quotaEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := &quotaEntry{ekey: ekey, known: b.tags[ekey]}
	if r := b.keys[rkey]; r != nil && len(r.wins) == len(p.Ticks) {
		q.known = r.epoch
		for i, w := range r.wins {
			if w.n > 0 {
				q.counts = append(q.counts, int64(i+1), w.idx, w.n)
			}
		}
	}
	return q
}

// answered records a call's answer for stepped key rkey under p at now
// (the limiter's clock): the tag's epoch it read (0: not read), and cost
// events admitted (0: none).
func (b *quotaBook) answered(rkey string, q *quotaEntry, p *plan, epoch, cost, now int64) {
	if epoch == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tags == nil {
		b.tags = make(map[string]int64)
		b.keys = make(map[string]*quotaRecord)
	}
	if _, ok := b.tags[q.ekey]; ok || len(b.tags) < maxEpochs {
		b.tags[q.ekey] = epoch
	}
	r := b.keys[rkey]
	if r == nil || len(r.wins) != len(p.Ticks) {
		if cost <= 0 || !b.room(now) {
			return
		}
		r = &quotaRecord{wins: make([]quotaCount, len(p.Ticks))}
		b.keys[rkey] = r
	}
	r.epoch = epoch
	if cost > 0 {
		r.count(p, cost, now)
	}
}

// count adds cost events admitted at now to r's windows.
func (r *quotaRecord) count(p *plan, cost, now int64) {
	for i, t := range p.Ticks {
		if !t.Stepped() {
			continue
		}
		w := t.Window(now)
		if r.wins[i].idx != w.Idx {
			r.wins[i] = quotaCount{idx: w.Idx}
		}
		r.wins[i].n += cost
		r.until = max(r.until, t.StartOf(w, 1))
	}
}

// room reports whether a new record fits, dropping those whose windows
// have ended at now when the book is full (at most once a second).
func (b *quotaBook) room(now int64) bool {
	if len(b.keys) < maxQuotaKeys {
		return true
	}
	if now-b.swept < 1_000_000 {
		return false
	}
	b.swept = now
	for k, r := range b.keys {
		if r.until <= now {
			delete(b.keys, k)
		}
	}
	return len(b.keys) < maxQuotaKeys
}

// appendQuota appends entries' quota section of bucket.lua's batch form,
// keys[i] being the 1-based index among the call's buckets of entries[i],
// and returns it with the epoch keys to append to the call's keys.
func appendQuota(args []any, at []int, entries []*quotaEntry) []any {
	args = append(args, "q", newID(), strconv.Itoa(len(entries)))
	for i, q := range entries {
		args = append(args, strconv.Itoa(at[i]), q.known, len(q.counts)/3)
		for _, v := range q.counts {
			args = append(args, v)
		}
	}
	return args
}

// appendPathQuota appends a path's quota section (see path.lua's layout
// table): per level its entry (nil: a level without stepped limits).
func appendPathQuota(args []any, entries []*quotaEntry) []any {
	args = append(args, newID())
	for _, q := range entries {
		if q == nil {
			args = append(args, 0, 0)
			continue
		}
		args = append(args, q.known, len(q.counts)/3)
		for _, v := range q.counts {
			args = append(args, v)
		}
	}
	return append(args, "q")
}

// settled adds delta events (a reservation's settlement; negative: a
// refund) to stepped key rkey's count under p, for each limit whose
// counted window is the one of at (the limiter's clock when the
// reservation was made), never below 0.
func (b *quotaBook) settled(rkey string, p *plan, delta, at int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.keys[rkey]
	if r == nil || len(r.wins) != len(p.Ticks) {
		return
	}
	for i, t := range p.Ticks {
		if t.Stepped() && r.wins[i].idx == t.Window(at).Idx {
			r.wins[i].n = max(0, r.wins[i].n+delta)
		}
	}
}
