package bench

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"time"
)

// histSub is the number of buckets per power of two: latencies are recorded
// to within 1/64 (1.6%) of their value.
const (
	histSubBits = 6
	histSub     = 1 << histSubBits
	histBuckets = histSub * (64 - histSubBits)
)

// Histogram records durations in log-linear buckets. Its zero value is an
// empty histogram. It is not safe for concurrent use: give each goroutine
// its own and Merge them.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	max    time.Duration
}

func histIndex(v uint64) int {
	if v < histSub {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1 // v>>shift is in [histSub, 2·histSub)
	return histSub*(shift+1) + int(v>>uint(shift)) - histSub
}

// histLower is the smallest value recorded in bucket i.
func histLower(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	shift := i/histSub - 1
	return uint64(i%histSub+histSub) << uint(shift)
}

// Record adds one duration (negative ones count as zero).
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d))]++
	h.n++
	if d > h.max {
		h.max = d
	}
}

// Merge adds o's records to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	if o.max > h.max {
		h.max = o.max
	}
}

// Count is the number of records.
func (h *Histogram) Count() uint64 { return h.n }

// Quantile returns the q-quantile (0 < q ≤ 1): the midpoint of the bucket
// holding the record of rank ⌈q·n⌉, never above the largest record. It
// returns 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if float64(rank) < q*float64(h.n) {
		rank++
	}
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo := histLower(i)
			hi := histLower(i + 1)
			mid := time.Duration(lo + (hi-lo)/2)
			if mid > h.max {
				mid = h.max
			}
			return mid
		}
	}
	return h.max
}

// Max returns the largest record (0 for an empty histogram).
func (h *Histogram) Max() time.Duration { return h.max }

// histJSON is a Histogram's JSON form: its non-empty buckets only.
type histJSON struct {
	N       uint64      `json:"n"`
	Max     int64       `json:"max"`
	Buckets [][2]uint64 `json:"buckets"` // bucket index, count
}

// MarshalJSON encodes the histogram compactly, so that a fleet worker
// process can hand its latencies to the comparison.
func (h *Histogram) MarshalJSON() ([]byte, error) {
	j := histJSON{N: h.n, Max: int64(h.max), Buckets: [][2]uint64{}}
	for i, c := range h.counts {
		if c > 0 {
			j.Buckets = append(j.Buckets, [2]uint64{uint64(i), c})
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON encoded, replacing h's records.
func (h *Histogram) UnmarshalJSON(data []byte) error {
	var j histJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	var out Histogram
	for _, b := range j.Buckets {
		if b[0] >= histBuckets {
			return fmt.Errorf("bench: histogram bucket %d out of range", b[0])
		}
		out.counts[b[0]] += b[1]
		out.n += b[1]
	}
	if out.n != j.N || j.Max < 0 {
		return fmt.Errorf("bench: histogram of %d records has buckets holding %d, or a negative maximum", j.N, out.n)
	}
	out.max = time.Duration(j.Max)
	*h = out
	return nil
}
