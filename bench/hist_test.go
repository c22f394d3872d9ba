package bench

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistIndexRoundTrip(t *testing.T) {
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 129, 1000, 123456789, 1 << 40, 1<<63 + 12345} {
		i := histIndex(v)
		if lo, hi := histLower(i), histLower(i+1); v < lo || (i+1 < histBuckets && v >= hi) {
			t.Errorf("value %d: bucket %d is [%d, %d)", v, i, lo, hi)
		}
	}
	for i := 1; i < histBuckets; i++ {
		if histLower(i) <= histLower(i-1) {
			t.Fatalf("bucket %d starts at %d, not after bucket %d at %d", i, histLower(i), i-1, histLower(i-1))
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	var all []time.Duration
	for range 100000 {
		d := time.Duration(r.ExpFloat64() * float64(50*time.Microsecond))
		h.Record(d)
		all = append(all, d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.99, 0.999, 1} {
		want := all[int(q*float64(len(all)))-1]
		got := h.Quantile(q)
		if diff := float64(got-want) / float64(want); diff > 0.02 || diff < -0.02 {
			t.Errorf("q%.3f = %s, exact %s (%.1f%% off)", q, got, want, 100*diff)
		}
	}
}

func TestHistogramJSON(t *testing.T) {
	var h Histogram
	for _, d := range []time.Duration{0, 1, 150 * time.Microsecond, 151 * time.Microsecond, 3 * time.Second} {
		h.Record(d)
	}
	data, err := json.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	var back Histogram
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back != h {
		t.Errorf("round trip of %s changed the histogram", data)
	}
	for _, bad := range []string{`{"n":1,"max":5,"buckets":[]}`, `{"n":1,"max":5,"buckets":[[99999,1]]}`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
