package core

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"hash/maphash"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
)

// localKey names one bucket in local memory: the plan's 64-bit fingerprint
// and the caller's key, in a form of bounded size (see makeLocalKey).
// Building and looking up a key never allocates once the pool of hashers is
// warm; inserting copies a verbatim key, because some frameworks (fiber)
// reuse the memory behind request strings.
//
// The struct is kept to four words: the compiler keeps a struct of that
// size in registers, while a larger one (the digest in a field of its own)
// went through memory and made every local decision about 10 ns slower.
type localKey struct {
	key string // the key verbatim, or digestedKey
	// For a verbatim key, id is the plan's fingerprint and sum is zero.
	// For a digested key, id and sum are a digest of the fingerprint and
	// the key together (see digestLocalKey).
	id, sum uint64
}

// maxLocalKey is the longest key local memory holds verbatim; a longer one
// is held as its digest, so that no entry holds more than maxLocalKey bytes
// of its key whatever the caller passes. The digest lives in localKey's
// words, which every entry carries anyway, so a digested key costs no
// memory beyond the entry's fixed size, where a copy of even a 65-byte key
// would cost 80 (the allocator's size class). The threshold is not lower
// because hashing costs time on every lookup (about 150 ns for 65 bytes,
// twice the rest of a local decision) while a verbatim key costs only its
// copy, at most 64 bytes: common keys (a tenant UUID, an IPv6 /64 with its
// prefix) stay verbatim and are looked up without hashing.
const maxLocalKey = 64

// digestedKey stands in localKey.key for a key held as its digest. It is
// longer than maxLocalKey, so it is never equal to a key held verbatim: a
// long key's entry can never be mistaken for a short key's.
var digestedKey = strings.Repeat("#", maxLocalKey+1)

// makeLocalKey returns the localKey of key under plan id: key itself if it
// is at most maxLocalKey bytes, otherwise its digest. Digesting reads the
// whole key, outside any lock.
func makeLocalKey(id uint64, key string) localKey {
	if len(key) <= maxLocalKey {
		return localKey{key: key, id: id}
	}
	return digestLocalKey(id, key)
}

// keyHasher digests long keys. hash.Hash takes bytes, and converting a
// string of unbounded length to bytes would copy it onto the heap, so the
// key passes through buf a kilobyte at a time. Hashers are pooled so that
// digesting allocates nothing once the pool is warm.
type keyHasher struct {
	h   hash.Hash
	buf [1024]byte
	sum [sha256.Size]byte
}

var keyHashers = sync.Pool{New: func() any { return &keyHasher{h: sha256.New()} }}

// keySalt, secret and drawn once per process, prefixes every digest, so
// that clients cannot compute digests: a digest's bits can then choose the
// shard without letting anyone aim many keys at one shard.
var keySalt = func() (b [32]byte) {
	rand.Read(b[:])
	return b
}()

// digestLocalKey returns the localKey of a key longer than maxLocalKey: the
// first 128 bits of the SHA-256 of the salt, the fingerprint and the key. A
// chance collision with any key of a full map (100,000 entries) has odds of
// about 2^-111 per lookup, and finding a colliding pair on purpose would
// take about 2^64 hashes even to someone who knew the salt.
func digestLocalKey(id uint64, key string) localKey {
	kh := keyHashers.Get().(*keyHasher)
	kh.h.Reset()
	kh.h.Write(keySalt[:])
	binary.LittleEndian.PutUint64(kh.buf[:8], id)
	kh.h.Write(kh.buf[:8])
	for len(key) > 0 {
		n := copy(kh.buf[:], key)
		kh.h.Write(kh.buf[:n])
		key = key[n:]
	}
	sum := kh.h.Sum(kh.sum[:0])
	k := localKey{key: digestedKey, id: binary.LittleEndian.Uint64(sum), sum: binary.LittleEndian.Uint64(sum[8:])}
	keyHashers.Put(kh)
	return k
}

var shardSeed = maphash.MakeSeed()

const numShards = 64

// shardedMap is a bounded map split into shards, each with its own mutex,
// so that concurrent requests on different keys rarely contend. When a shard
// is full, an insert evicts lazily: it samples a few entries and drops the
// one that matters least (see evict), and a shard whose map has seen
// many removals rebuilds it (see removedOne). There is no background
// sweeper.
//
// Locks are held only for map and arithmetic work, never across I/O.
type shardedMap[V any] struct {
	shards   [numShards]shard[V]
	perShard int
	// live counts the entries of all shards, so that a lookup in an empty
	// map (the deny cache and the fallback's buckets while no key is near
	// its limit) touches neither a shard's lock nor its map: on the hot
	// path those are cache misses.
	live atomic.Int64
	// weight ranks entries for eviction at time now: lower goes first;
	// a weight <= 0 means the entry carries no information (a full
	// bucket, an expired denial) and is dropped at once.
	weight func(v *V, now int64) int64
	// drop, if set, is told of every entry evicted, before it goes.
	drop func(v *V)
}

type shard[V any] struct {
	mu sync.Mutex
	m  map[localKey]*V
	// removed counts the entries deleted from m since it was made; see
	// removedOne.
	removed int
}

func newShardedMap[V any](capacity int, weight func(*V, int64) int64) *shardedMap[V] {
	s := &shardedMap[V]{perShard: max(1, capacity/numShards), weight: weight}
	for i := range s.shards {
		s.shards[i].m = make(map[localKey]*V)
	}
	return s
}

// shard returns k's shard, by a seeded hash of a verbatim key or by a
// digested key's salted digest, so that clients cannot aim many keys at one
// shard. A verbatim key's sum is zero.
func (s *shardedMap[V]) shard(k localKey) *shard[V] {
	return &s.shards[(maphash.String(shardSeed, k.key)^k.id^k.sum)%numShards]
}

// entry returns k's entry, inserting a zero one if create is set (else it
// may return nil). The caller holds sh.mu.
func (s *shardedMap[V]) entry(sh *shard[V], k localKey, now int64, create bool) *V {
	v := sh.m[k]
	if v == nil && create {
		if len(sh.m) >= s.perShard {
			s.evict(sh, now)
		}
		v = new(V)
		// Build the stored key afresh rather than from k.key, so that the
		// caller's key never escapes: it is only read, or copied.
		nk := localKey{key: digestedKey, id: k.id, sum: k.sum}
		if len(k.key) <= maxLocalKey {
			nk.key = strings.Clone(k.key)
		}
		sh.m[nk] = v
		s.live.Add(1)
	}
	return v
}

// evictSample is how many entries an insert into a full shard looks at.
const evictSample = 8

// evict drops from a full shard the sampled entry of lowest weight. Go's map
// iteration starts at a random position, so the sample is spread over the
// shard.
func (s *shardedMap[V]) evict(sh *shard[V], now int64) {
	var victim localKey
	best := int64(-1)
	n := 0
	for k, v := range sh.m {
		w := s.weight(v, now)
		if w <= 0 {
			victim = k
			break
		}
		if best < 0 || w < best {
			victim, best = k, w
		}
		if n++; n == evictSample {
			break
		}
	}
	if s.drop != nil {
		s.drop(sh.m[victim])
	}
	delete(sh.m, victim)
	s.removedOne(sh)
}

// compactEvery is how many removals, in units of a shard's capacity, a
// shard's map takes before it is rebuilt: a larger value rebuilds less
// often and lets the map drift further from its compact size (measured
// over 10 million 20-byte keys through a full store: at most 195 bytes per
// entry at 1, 230 at 4).
const compactEvery = 4

// removedOne notes that an entry left sh, and rebuilds sh's map after
// enough removals. A Go map never shrinks, and under steady churn, one
// entry out for every one in, its tables keep splitting: a map holding a
// constant number of entries grows with the number of keys it has seen
// (measured with Go 1.26 and no rebuilds, a full store went from 314 bytes
// per entry after 2.5 million keys to 426 after 10 million, and kept
// growing). A fresh map sized for the entries is compact again. One
// rebuild per compactEvery*perShard removals costs a quarter of a map
// insert per removal. The caller holds sh.mu.
func (s *shardedMap[V]) removedOne(sh *shard[V]) {
	s.live.Add(-1)
	if sh.removed++; sh.removed < compactEvery*s.perShard {
		return
	}
	m := make(map[localKey]*V, len(sh.m))
	maps.Copy(m, sh.m)
	sh.m, sh.removed = m, 0
}

// len counts entries; for tests and metrics.
func (s *shardedMap[V]) len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// localEntry is a bucket held in memory, with room for two limits inline.
type localEntry struct {
	b   bucket
	buf [2]tat
}

// weight of a local bucket for eviction: how long until it is full and
// unlocked again. A full bucket is the same as a missing one and goes first;
// limited and locked buckets go last.
func (e *localEntry) weight(now int64) int64 {
	if !e.b.set {
		return 0
	}
	w := max(e.b.lock, e.b.full) - now
	for i := range e.b.tats {
		w = max(w, e.b.tats[i].us-now) // a stepped limit's (a debt) never counts here: e.b.full does
	}
	return w
}

// localStore keeps buckets in process memory, bounded by entry count and so
// in bytes, since no entry holds more than maxLocalKey bytes of its key. It
// runs the same arithmetic as the Redis script (gcra.go).
type localStore struct {
	m      *shardedMap[localEntry]
	slotc  slotCounts         // slots in flight (see Concurrency); bounded by them
	owed   *owedStore         // what the fallback admitted that Redis has not seen (owed.go); nil but for New under FallbackLocal
	shares *shareLocalRecords // the records of paths' shared levels (path_share.go)
}

func newLocalStore(capacity int) *localStore {
	return &localStore{m: newShardedMap(capacity, (*localEntry).weight), slotc: slotCounts{n: make(map[localKey]int)}, shares: newShareLocalRecords()}
}

// slots returns the counts of concurrency slots held in memory.
func (s *localStore) slots() *slotCounts { return &s.slotc }

// take applies one request to key's bucket under ticks at now.
func (s *localStore) take(id uint64, key string, now int64, ticks []tickLimit, cost, maxWait, penalty int64) decision {
	k := makeLocalKey(id, key)
	sh := s.m.shard(k)
	sh.mu.Lock()
	e := s.m.entry(sh, k, now, true)
	if !e.b.set && e.b.tats == nil {
		e.b.tats = e.buf[:0]
	}
	d, _ := stepBucket(&e.b, now, ticks, cost, maxWait, penalty)
	sh.mu.Unlock()
	return d
}

// lock locks key's bucket under ticks until the microsecond until (see
// lockBucket) and returns when its lock ends.
func (s *localStore) lock(id uint64, key string, now int64, ticks []tickLimit, until int64) int64 {
	k := makeLocalKey(id, key)
	sh := s.m.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.m.entry(sh, k, now, true)
	if !e.b.set && e.b.tats == nil {
		e.b.tats = e.buf[:0]
	}
	return lockBucket(&e.b, now, ticks, until)
}

// charge records, without ever refusing, that cost tokens were spent on key
// elsewhere (in Redis), so that a switch to the local store starts from the
// key's recent use instead of a full bucket. The debt is capped at one full
// bucket. A key not held yet is added only if insert is set.
func (s *localStore) charge(id uint64, key string, now int64, ticks []tickLimit, cost int64, insert bool) {
	if !insert && s.m.live.Load() == 0 {
		return // nothing to charge
	}
	k := makeLocalKey(id, key)
	sh := s.m.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := s.m.entry(sh, k, now, insert); e != nil {
		e.charge(now, ticks, cost)
	}
}

// charge records on e, without ever refusing, that cost tokens were spent
// at now under ticks: its debt grows by cost, capped at one full bucket.
func (e *localEntry) charge(now int64, ticks []tickLimit, cost int64) {
	b := &e.b
	ws := windowsAt(now, ticks)
	if !b.set {
		b.tats = e.buf[:0]
		for i, t := range ticks {
			if t.Stepped() {
				b.tats = append(b.tats, tat{frac: ws[i].Idx})
			} else {
				b.tats = append(b.tats, tat{us: now})
			}
		}
		b.set = true
	}
	for i, t := range ticks {
		d := debtAt(b.tats[i], now, t, ws[i])
		d = min(d+cost*t.P, t.Capacity())
		if t.Stepped() {
			b.tats[i] = tat{us: d, frac: ws[i].Idx}
			b.full = max(b.full, now+until(d, now, t, ws[i]))
		} else {
			b.tats[i] = tat{us: now + d/t.R, frac: d % t.R}
		}
	}
}

// denial is what the deny cache remembers of a key.
type denial struct {
	until int64 // local microsecond before which a unit request cannot pass
	// expires is when the entry stops answering and Redis is asked again:
	// until, but at most denyMaxAge after Redis's answer, so that a key
	// reset elsewhere ([Limiter.Reset] on another replica) is denied here
	// for at most that long.
	expires int64
	reset   int64 // local microsecond the bucket is full again
	// skew is Redis's clock less this limiter's when Redis answered (see
	// Result.Time): a denial answered from the cache is at its local
	// instant plus skew on Redis's clock, so that a replay decides it at
	// an instant after the answer it comes from, and before until.
	skew   int64
	locked bool
	index  int32
	// probe is open while one request, after until, asks Redis for the
	// key's new state; requests arriving meanwhile wait for its answer
	// instead of all asking at once.
	probe chan struct{}
}

// denyCache remembers, per key and plan, until when Redis will deny a unit
// request on the key, so that a flood on one key costs Redis about one call
// per refill instead of one per request.
type denyCache struct {
	m *shardedMap[denial]
}

func newDenyCache(capacity int) *denyCache {
	m := newShardedMap(capacity, func(d *denial, now int64) int64 {
		if d.probe != nil {
			return 1 << 62 // a request is waiting on it
		}
		return d.expires - now
	})
	// An entry can be evicted while its probe is out (every sampled entry
	// had one). Its waiters must not wait for an answer that can no longer
	// be put: wake them, and they ask Redis themselves.
	m.drop = func(d *denial) {
		if d.probe != nil {
			close(d.probe)
			d.probe = nil
		}
	}
	return &denyCache{m: m}
}

// denyState is what the deny cache says of a key.
type denyState int8

const (
	denyMiss  denyState = iota // nothing known: ask Redis
	denyHit                    // denied until the entry's until
	denyProbe                  // expired: the caller asks Redis and must call release
	denyWait                   // expired, another request is asking: wait on the channel
)

// holdsAny reports whether c, which may be nil (no deny cache), holds
// any entry: a decision need not look a key up in an empty cache.
func (c *denyCache) holdsAny() bool { return c != nil && c.m.live.Load() != 0 }

// check looks key up at now.
func (c *denyCache) check(id uint64, key string, now int64) (denial, denyState, chan struct{}) {
	if c.m.live.Load() == 0 {
		return denial{}, denyMiss, nil
	}
	k := makeLocalKey(id, key)
	sh := c.m.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	d := sh.m[k]
	switch {
	case d == nil:
		return denial{}, denyMiss, nil
	case now < d.expires:
		return *d, denyHit, nil
	case d.probe != nil:
		return denial{}, denyWait, d.probe
	}
	d.probe = make(chan struct{})
	return denial{}, denyProbe, d.probe
}

// put remembers what Redis said of key, waking any requests waiting on a
// probe.
func (c *denyCache) put(id uint64, key string, now int64, d denial) {
	k := makeLocalKey(id, key)
	sh := c.m.shard(k)
	sh.mu.Lock()
	v := c.m.entry(sh, k, now, true)
	if v.probe != nil {
		close(v.probe)
	}
	*v = d
	sh.mu.Unlock()
}

// release ends probe ch on key if it is still open, waking its waiters,
// who then ask Redis themselves. An entry whose probe is still open was
// not replaced by a fresh answer (put): the probe was admitted with
// tokens to spare, or not answered. Its entry has expired and says
// nothing any more, so it goes: kept, it would make every later request
// on the key a probe of its own, an allocation each and, under
// concurrency, a wait of one round trip.
func (c *denyCache) release(id uint64, key string, ch chan struct{}) {
	k := makeLocalKey(id, key)
	sh := c.m.shard(k)
	sh.mu.Lock()
	if d := sh.m[k]; d != nil && d.probe == ch {
		close(ch)
		d.probe = nil
		delete(sh.m, k)
		c.m.removedOne(sh)
	}
	sh.mu.Unlock()
}

// delete forgets key's entry, closing its probe if one is out (its waiters
// then ask Redis themselves).
func (c *denyCache) delete(id uint64, key string) {
	c.m.delete(makeLocalKey(id, key))
}

// delete forgets key's bucket.
func (s *localStore) delete(id uint64, key string) {
	s.m.delete(makeLocalKey(id, key))
}

// delete removes k's entry, if any, telling drop first.
func (s *shardedMap[V]) delete(k localKey) {
	sh := s.shard(k)
	sh.mu.Lock()
	if v := sh.m[k]; v != nil {
		if s.drop != nil {
			s.drop(v)
		}
		delete(sh.m, k)
		s.removedOne(sh)
	}
	sh.mu.Unlock()
}
