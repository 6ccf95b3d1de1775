package hybridlimit

// Histogram is a snapshot of a histogram with fixed buckets, in
// Prometheus's shape: Buckets[i] counts the observations at most Bounds[i],
// Count all of them, Sum their total. Durations are in seconds. Each
// snapshot has its own copy of the slices.
type Histogram struct {
	// Bounds are the buckets' upper bounds, ascending; the +Inf bucket is
	// left out (Count holds it).
	Bounds []float64
	// Buckets are the cumulative counts, one per bound.
	Buckets []uint64
	// Count is the number of observations.
	Count uint64
	// Sum is the sum of the observations.
	Sum float64
}
