package core

// spaceSaving is a Space-Saving sketch of the heaviest keys of a stream of
// weighted events, in fixed memory: m counters, each a key's hash, its
// count and the count it inherited when it took the counter over (its
// error). An event of a key that holds a counter adds to it; one of a key
// that holds none takes a free counter, or else the counter of the
// smallest count, keeping that count as its error. So, with N the stream's
// total weight and min the smallest count once every counter is taken
// (0 before):
//
//   - a key that holds a counter has count-err <= true <= count;
//   - a key that holds none has true <= min;
//   - min <= N/m.
//
// Every count is therefore within min of the truth either way, and every
// key heavier than N/m holds a counter. Adding an event allocates nothing:
// the counters are a min-heap by count in fixed arrays, found from a hash
// through a fixed open-addressing table.
type spaceSaving struct {
	n     int      // counters taken
	total int64    // the stream's total weight
	hash  []uint64 // per counter: the key's hash
	count []int64  // per counter: its count
	err   []int64  // per counter: the count it inherited
	heap  []int32  // counter indexes, a min-heap by count
	pos   []int32  // counter index -> its place in heap
	table []int32  // hash slot -> counter index + 1; 0: empty
	mask  uint64   // len(table) - 1

	nameCap int     // bytes of a name kept per counter; 0: names are not kept
	names   []byte  // m * nameCap: the key's first bytes, per counter
	nameLen []uint8 // per counter: the bytes of names used
}

// maxTopName is how many bytes of a key the sketch keeps as its name,
// when names are kept (see TopTalkers.Names); a longer key's name is its
// first maxTopName bytes.
const maxTopName = 64

// newSpaceSaving returns a sketch of m counters, keeping names of keys
// when names is set.
func newSpaceSaving(m int, names bool) *spaceSaving {
	size := 4
	for size < 2*m {
		size *= 2
	}
	s := &spaceSaving{
		hash: make([]uint64, m), count: make([]int64, m), err: make([]int64, m),
		heap: make([]int32, m), pos: make([]int32, m),
		table: make([]int32, size), mask: uint64(size - 1),
	}
	if names {
		s.nameCap = maxTopName
		s.names = make([]byte, m*maxTopName)
		s.nameLen = make([]uint8, m)
	}
	return s
}

// slot returns the first table slot a hash probes.
func (s *spaceSaving) slot(h uint64) uint64 {
	return (h * 0x9e3779b97f4a7c15) >> 32 & s.mask
}

// find returns the table slot holding h's counter, and whether it does;
// otherwise the empty slot where h would go.
func (s *spaceSaving) find(h uint64) (uint64, bool) {
	i := s.slot(h)
	for {
		c := s.table[i]
		if c == 0 {
			return i, false
		}
		if s.hash[c-1] == h {
			return i, true
		}
		i = (i + 1) & s.mask
	}
}

// unlink removes the table entry at slot i, moving back the entries after
// it that probed past it (linear probing without tombstones).
func (s *spaceSaving) unlink(i uint64) {
	for {
		s.table[i] = 0
		j := i
		for {
			j = (j + 1) & s.mask
			c := s.table[j]
			if c == 0 {
				return
			}
			home := s.slot(s.hash[c-1])
			// Move c back to i unless its home lies cyclically in (i, j].
			if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
				s.table[i] = c
				i = j
				break
			}
		}
	}
}

// add counts an event of weight w of the key hashed h, named key.
func (s *spaceSaving) add(h uint64, w int64, key string) {
	s.total += w
	i, ok := s.find(h)
	if ok {
		c := s.table[i] - 1
		s.count[c] += w
		s.down(int(s.pos[c]))
		return
	}
	var c int32
	if s.n < len(s.count) {
		c = int32(s.n)
		s.heap[s.n], s.pos[c] = c, int32(s.n)
		s.n++
		s.hash[c], s.count[c], s.err[c] = h, w, 0
		s.table[i] = c + 1
		s.up(int(s.pos[c]))
	} else {
		c = s.heap[0]
		old, _ := s.find(s.hash[c])
		s.unlink(old)
		s.hash[c], s.err[c] = h, s.count[c]
		s.count[c] += w
		i, _ = s.find(h) // the unlink may have moved the empty slot
		s.table[i] = c + 1
		s.down(0)
	}
	if s.nameCap > 0 {
		s.nameLen[c] = uint8(copy(s.names[int(c)*s.nameCap:(int(c)+1)*s.nameCap], key))
	}
}

// min is the sketch's error bound: the smallest count once every counter
// is taken, 0 before (every key seen then holds an exact counter).
func (s *spaceSaving) min() int64 {
	if s.n < len(s.count) {
		return 0
	}
	return s.count[s.heap[0]]
}

// up and down restore the heap after the count at place i changed.
func (s *spaceSaving) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if s.count[s.heap[p]] <= s.count[s.heap[i]] {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *spaceSaving) down(i int) {
	for {
		l, small := 2*i+1, i
		if l < s.n && s.count[s.heap[l]] < s.count[s.heap[small]] {
			small = l
		}
		if r := l + 1; r < s.n && s.count[s.heap[r]] < s.count[s.heap[small]] {
			small = r
		}
		if small == i {
			return
		}
		s.swap(i, small)
		i = small
	}
}

func (s *spaceSaving) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.pos[s.heap[i]], s.pos[s.heap[j]] = int32(i), int32(j)
}

// name returns the name kept for counter c, "" when names are not kept.
func (s *spaceSaving) name(c int) string {
	if s.nameCap == 0 {
		return ""
	}
	return string(s.names[c*s.nameCap : c*s.nameCap+int(s.nameLen[c])])
}

// reset empties the sketch, keeping its memory.
func (s *spaceSaving) reset() {
	s.n, s.total = 0, 0
	clear(s.table)
}
