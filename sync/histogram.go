package sync

import (
	"slices"
	"sync/atomic"
)

// Histogram is a snapshot of a histogram in Prometheus's shape: Buckets[i]
// counts the observations at most Bounds[i] (ascending, a copy per
// snapshot), Count all of them, Sum their total.
type Histogram struct {
	Bounds  []float64
	Buckets []uint64
	Count   uint64
	Sum     float64
}

// histSpec fixes a histogram's buckets and units.
type histSpec struct {
	// bounds are the upper bounds in the exported unit, ascending; at most
	// maxBounds of them.
	bounds []float64
	// per is how many recorded units make one exported unit: 1e9 for
	// durations recorded in nanoseconds and exported in seconds.
	per float64
}

// The Limiter's histograms (see Stats).
var (
	// roundDuration: from half a millisecond (a round on loopback) to 2.5
	// seconds (past any sane round timeout; a client that ignores context
	// deadlines waits out its ReadTimeout), about 2.5x apart.
	roundDuration = histSpec{
		bounds: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		per:    1e9,
	}
	// roundMessages: powers of 4 up to 65536, which spans a single key, one
	// full script call (256 keys by default) and a 64-call pipeline.
	roundMessages = histSpec{
		bounds: []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536},
		per:    1,
	}
)

// maxBounds bounds the buckets of a histogram, so that its counters are an
// array and a zero histogram is ready to use.
const maxBounds = 15

// histogram counts observations into the buckets of a histSpec. Its zero
// value is empty and ready to use; it is safe for concurrent use.
type histogram struct {
	// counts[i] counts the observations in (bounds[i-1], bounds[i]];
	// counts[len(bounds)] those above the last bound.
	counts [maxBounds + 1]atomic.Uint64
	sum    atomic.Int64 // in recorded units
}

// observe records one observation of raw recorded units.
func (h *histogram) observe(s *histSpec, raw int64) {
	// Dividing exact integers rounds once, so an observation equal to a
	// bound (1ms = 1e6ns) lands in that bound's bucket.
	i, _ := slices.BinarySearch(s.bounds, float64(raw)/s.per)
	h.counts[i].Add(1)
	h.sum.Add(raw)
}

// snapshot returns the histogram's counts, cumulative. The counters are
// read one by one while rounds go on; Count is the sum of the counts read,
// so the buckets always add up, and Sum may be a round ahead or behind.
func (h *histogram) snapshot(s *histSpec) Histogram {
	out := Histogram{
		Bounds:  slices.Clone(s.bounds),
		Buckets: make([]uint64, len(s.bounds)),
	}
	for i := range s.bounds {
		out.Count += h.counts[i].Load()
		out.Buckets[i] = out.Count
	}
	out.Count += h.counts[len(s.bounds)].Load()
	out.Sum = float64(h.sum.Load()) / s.per
	return out
}
