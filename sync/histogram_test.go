package sync

import (
	"slices"
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/histogram"
)

func TestHistogramSpecs(t *testing.T) {
	for name, s := range map[string]*histogram.Spec{"roundDuration": &roundDuration, "roundMessages": &roundMessages} {
		if len(s.Bounds) == 0 || len(s.Bounds) > histogram.MaxBounds {
			t.Errorf("%s: %d bounds, want 1 to %d", name, len(s.Bounds), histogram.MaxBounds)
		}
		if !slices.IsSorted(s.Bounds) || len(slices.Compact(slices.Clone(s.Bounds))) != len(s.Bounds) {
			t.Errorf("%s: bounds %v not strictly ascending", name, s.Bounds)
		}
	}
}
