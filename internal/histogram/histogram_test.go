package histogram

import (
	"slices"
	"testing"
	"time"
)

func TestObserve(t *testing.T) {
	messages := Spec{Bounds: []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536}, Per: 1}
	durations := Spec{Bounds: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}, Per: 1e9}
	tests := []struct {
		name    string
		spec    *Spec
		raw     []int64
		buckets []uint64
		count   uint64
		sum     float64
	}{
		{"empty", &messages, nil, []uint64{0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, 0},
		// A value equal to a bound lands in that bound's bucket; 0 in the
		// first; above the last bound only in Count.
		{"messages", &messages, []int64{0, 1, 2, 4, 5, 64, 65536, 65537},
			[]uint64{2, 4, 5, 6, 6, 6, 6, 6, 7}, 8, 131149},
		{"durations", &durations,
			[]int64{int64(100 * time.Microsecond), int64(time.Millisecond), int64(time.Millisecond + 1), int64(250 * time.Millisecond), int64(3 * time.Second)},
			[]uint64{1, 2, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4}, 5, 3.252100001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Recorder
			for _, v := range tt.raw {
				h.Observe(tt.spec, v)
			}
			got := h.Snapshot(tt.spec)
			if !slices.Equal(got.Bounds, tt.spec.Bounds) || !slices.Equal(got.Buckets, tt.buckets) || got.Count != tt.count || got.Sum != tt.sum {
				t.Errorf("Observe(%v) = %+v, want buckets %v, count %d, sum %v", tt.raw, got, tt.buckets, tt.count, tt.sum)
			}
			got.Bounds[0] = -1 // the snapshot's bounds are its own
			if tt.spec.Bounds[0] == -1 {
				t.Fatal("snapshot shares its bounds with the spec")
			}
		})
	}
}
