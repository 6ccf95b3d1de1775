package sync

import (
	"testing"

	"github.com/hybridlimit/hybridlimit"
)

// TestLimitsShared checks that equal limits share one copy, different ones
// do not, and that the set stays bounded.
func TestLimitsShared(t *testing.T) {
	var ls limits
	a, b := ls.get(hybridlimit.PerSecond(10)), ls.get(hybridlimit.PerSecond(10))
	if a != b {
		t.Error("two copies of one limit")
	}
	if c := ls.get(hybridlimit.PerSecond(11)); c == a || *c != hybridlimit.PerSecond(11) {
		t.Errorf("PerSecond(11) got %v at %p, PerSecond(10)'s copy is at %p", *c, c, a)
	}
	for i := range 3 * maxLimits {
		if p := ls.get(hybridlimit.PerSecond(int64(i + 1))); p.Rate != int64(i+1) {
			t.Fatalf("got %v for rate %d", *p, i+1)
		}
	}
	if n := len(ls.byID); n > maxLimits {
		t.Errorf("%d limits kept, bound %d", n, maxLimits)
	}
}
