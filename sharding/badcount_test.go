package sharding

import (
	"testing"

	"github.com/hybridlimit/hybridlimit"
)

// TestHelpersTakeAnyShardCount calls the exported helpers with shard
// counts below 1: they divided by it (a panic at 0) or returned invalid
// limits (a negative rate at -2). Such a count is one part.
func TestHelpersTakeAnyShardCount(t *testing.T) {
	limit := hybridlimit.PerSecond(10)
	for _, s := range []int{0, -2} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("s = %d: panic %v", s, p)
				}
			}()
			if p := Part(limit, 0, s); p != limit {
				t.Errorf("Part(limit, 0, %d) = %v, want the whole limit", s, p)
			}
			if q := Quota(limit, 0, s); q != limit {
				t.Errorf("Quota(limit, 0, %d) = %v, want the whole limit", s, q)
			}
			if got := Slice(100, 0, s); got != 0 {
				t.Errorf("Slice(100, 0, %d) = %d, want 0", s, got)
			}
			if got := Group(5, 0, s, 64); got != 5 {
				t.Errorf("Group(5, 0, %d, 64) = %d, want 5", s, got)
			}
			if got := Home("i", "k", s); got != 0 {
				t.Errorf("Home(i, k, %d) = %d, want 0", s, got)
			}
			if Place("k", 0, s) == "" || PartKey("k", 0, s) == "" {
				t.Errorf("Place or PartKey with %d parts named nothing", s)
			}
		}()
	}
}
