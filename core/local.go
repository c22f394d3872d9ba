package core

import (
	"hash/maphash"
	"strings"
	"sync"
)

// localKey names one bucket in local memory: the plan's 64-bit fingerprint
// and the caller's key. Looking it up never allocates; inserting copies the
// key, because some frameworks (fiber) reuse the memory behind request
// strings.
type localKey struct {
	id  uint64
	key string
}

var shardSeed = maphash.MakeSeed()

const numShards = 64

// shardedMap is a bounded map split into shards, each with its own mutex,
// so that concurrent requests on different keys rarely contend. When a shard
// is full, an insert evicts lazily: it samples a few entries and drops the
// one that matters least (see evictable). There is no background sweeper.
//
// Locks are held only for map and arithmetic work, never across I/O.
type shardedMap[V any] struct {
	shards   [numShards]shard[V]
	perShard int
	// weight ranks entries for eviction at time now: lower goes first;
	// a weight <= 0 means the entry carries no information (a full
	// bucket, an expired denial) and is dropped at once.
	weight func(v *V, now int64) int64
}

type shard[V any] struct {
	mu sync.Mutex
	m  map[localKey]*V
}

func newShardedMap[V any](capacity int, weight func(*V, int64) int64) *shardedMap[V] {
	s := &shardedMap[V]{perShard: max(1, capacity/numShards), weight: weight}
	for i := range s.shards {
		s.shards[i].m = make(map[localKey]*V)
	}
	return s
}

func (s *shardedMap[V]) shard(k localKey) *shard[V] {
	return &s.shards[(maphash.String(shardSeed, k.key)^k.id)%numShards]
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
		sh.m[localKey{id: k.id, key: strings.Clone(k.key)}] = v
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
			delete(sh.m, k)
			return
		}
		if best < 0 || w < best {
			victim, best = k, w
		}
		if n++; n == evictSample {
			break
		}
	}
	delete(sh.m, victim)
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
	w := e.b.lock - now
	for i := range e.b.tats {
		w = max(w, e.b.tats[i].us-now)
	}
	return w
}

// localStore keeps buckets in process memory, bounded by entry count. It
// runs the same arithmetic as the Redis script (gcra.go).
type localStore struct {
	m *shardedMap[localEntry]
}

func newLocalStore(capacity int) *localStore {
	return &localStore{m: newShardedMap(capacity, (*localEntry).weight)}
}

// decide applies one request to key's bucket under ticks at now.
func (s *localStore) decide(id uint64, key string, now int64, ticks []tickLimit, cost, maxWait, penalty int64) decision {
	k := localKey{id, key}
	sh := s.m.shard(k)
	sh.mu.Lock()
	e := s.m.entry(sh, k, now, true)
	if !e.b.set && e.b.tats == nil {
		e.b.tats = e.buf[:0]
	}
	d, _ := decide(&e.b, now, ticks, cost, maxWait, penalty)
	sh.mu.Unlock()
	return d
}

// charge records, without ever refusing, that cost tokens were spent on key
// elsewhere (in Redis), so that a switch to the local store starts from the
// key's recent use instead of a full bucket. The debt is capped at one full
// bucket.
func (s *localStore) charge(id uint64, key string, now int64, ticks []tickLimit, cost int64) {
	k := localKey{id, key}
	sh := s.m.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.m.entry(sh, k, now, true)
	b := &e.b
	if !b.set {
		b.tats = e.buf[:0]
		for range ticks {
			b.tats = append(b.tats, tat{us: now})
		}
		b.set = true
	}
	for i, t := range ticks {
		d := max(0, (b.tats[i].us-now)*t.r+b.tats[i].frac)
		d = min(d+cost*t.p, t.capacity())
		b.tats[i] = tat{us: now + d/t.r, frac: d % t.r}
	}
}

// denial is what the deny cache remembers of a key.
type denial struct {
	until  int64 // local microsecond before which a unit request cannot pass
	reset  int64 // local microsecond the bucket is full again
	locked bool
	index  int
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
	return &denyCache{m: newShardedMap(capacity, func(d *denial, now int64) int64 {
		if d.probe != nil {
			return 1 << 62 // a request is waiting on it
		}
		return d.until - now
	})}
}

// denyState is what the deny cache says of a key.
type denyState int8

const (
	denyMiss  denyState = iota // nothing known: ask Redis
	denyHit                    // denied until the entry's until
	denyProbe                  // expired: the caller asks Redis and must call release
	denyWait                   // expired, another request is asking: wait on the channel
)

// check looks key up at now.
func (c *denyCache) check(id uint64, key string, now int64) (denial, denyState, chan struct{}) {
	k := localKey{id, key}
	sh := c.m.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	d := sh.m[k]
	switch {
	case d == nil:
		return denial{}, denyMiss, nil
	case now < d.until:
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
	k := localKey{id, key}
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
// who then ask Redis themselves.
func (c *denyCache) release(id uint64, key string, ch chan struct{}) {
	k := localKey{id, key}
	sh := c.m.shard(k)
	sh.mu.Lock()
	if d := sh.m[k]; d != nil && d.probe == ch {
		close(ch)
		d.probe = nil
	}
	sh.mu.Unlock()
}
