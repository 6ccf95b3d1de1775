package sync

import (
	"slices"
	"testing"
	"time"
)

func TestHistogramSpecs(t *testing.T) {
	for name, s := range map[string]*histSpec{"roundDuration": &roundDuration, "roundMessages": &roundMessages} {
		if len(s.bounds) == 0 || len(s.bounds) > maxBounds {
			t.Errorf("%s: %d bounds, want 1 to %d", name, len(s.bounds), maxBounds)
		}
		if !slices.IsSorted(s.bounds) || len(slices.Compact(slices.Clone(s.bounds))) != len(s.bounds) {
			t.Errorf("%s: bounds %v not strictly ascending", name, s.bounds)
		}
	}
}

func TestHistogramObserve(t *testing.T) {
	tests := []struct {
		name    string
		spec    *histSpec
		raw     []int64
		buckets []uint64
		count   uint64
		sum     float64
	}{
		{"empty", &roundMessages, nil, []uint64{0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, 0},
		// A value equal to a bound lands in that bound's bucket; 0 in the
		// first; above the last bound only in Count.
		{"messages", &roundMessages, []int64{0, 1, 2, 4, 5, 64, 65536, 65537},
			[]uint64{2, 4, 5, 6, 6, 6, 6, 6, 7}, 8, 131149},
		{"durations", &roundDuration,
			[]int64{int64(100 * time.Microsecond), int64(time.Millisecond), int64(time.Millisecond + 1), int64(250 * time.Millisecond), int64(3 * time.Second)},
			[]uint64{1, 2, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4}, 5, 3.252100001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h histogram
			for _, v := range tt.raw {
				h.observe(tt.spec, v)
			}
			got := h.snapshot(tt.spec)
			if !slices.Equal(got.Bounds, tt.spec.bounds) || !slices.Equal(got.Buckets, tt.buckets) || got.Count != tt.count || got.Sum != tt.sum {
				t.Errorf("observe(%v) = %+v, want buckets %v, count %d, sum %v", tt.raw, got, tt.buckets, tt.count, tt.sum)
			}
			got.Bounds[0] = -1 // the snapshot's bounds are its own
			if tt.spec.bounds[0] == -1 {
				t.Fatal("snapshot shares its bounds with the spec")
			}
		})
	}
}
