// Package histogram counts observations into fixed buckets, concurrently,
// and snapshots them as a hybridlimit.Histogram. The hybrid limiter, the
// rule engine and the Envoy service each record their histograms with it.
package histogram

import (
	"slices"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit"
)

// MaxBounds bounds the buckets of a histogram, so that its counters are an
// array and a zero Recorder is ready to use.
const MaxBounds = 15

// Spec fixes a histogram's buckets and units.
type Spec struct {
	// Bounds are the upper bounds in the exported unit, ascending; at most
	// MaxBounds of them.
	Bounds []float64
	// Per is how many recorded units make one exported unit: 1e9 for
	// durations recorded in nanoseconds and exported in seconds.
	Per float64
}

// Recorder counts observations into the buckets of a Spec. Its zero value
// is empty and ready to use; it is safe for concurrent use.
type Recorder struct {
	// counts[i] counts the observations in (bounds[i-1], bounds[i]];
	// counts[len(bounds)] those above the last bound.
	counts [MaxBounds + 1]atomic.Uint64
	sum    atomic.Int64 // in recorded units
}

// Observe records one observation of raw recorded units.
func (h *Recorder) Observe(s *Spec, raw int64) {
	// Dividing exact integers rounds once, so an observation equal to a
	// bound (1ms = 1e6ns) lands in that bound's bucket.
	i, _ := slices.BinarySearch(s.Bounds, float64(raw)/s.Per)
	h.counts[i].Add(1)
	h.sum.Add(raw)
}

// Snapshot returns the counts, cumulative. The counters are read one by one
// while observations go on; Count is the sum of the counts read, so the
// buckets always add up, and Sum may be an observation ahead or behind.
func (h *Recorder) Snapshot(s *Spec) hybridlimit.Histogram {
	out := hybridlimit.Histogram{
		Bounds:  slices.Clone(s.Bounds),
		Buckets: make([]uint64, len(s.Bounds)),
	}
	for i := range s.Bounds {
		out.Count += h.counts[i].Load()
		out.Buckets[i] = out.Count
	}
	out.Count += h.counts[len(s.Bounds)].Load()
	out.Sum = float64(h.sum.Load()) / s.Per
	return out
}
