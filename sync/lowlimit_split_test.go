package sync

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestLowLimitSplitLikeWhole: the low-limit rule judges a split key whole,
// so that a split key leases as it did whole: with fewer live instances
// than parts, and where a part's rate, rounded to whole tokens, would fall
// under a threshold the whole key meets (800 a second among 100 instances
// is 2 tokens each a 250 ms interval; the part of 266 of it split 3 ways
// would make 1.995, and be decided per request, a fetch a decision).
func TestLowLimitSplitLikeWhole(t *testing.T) {
	l, err := New(redistest.Standalone(t), WithPrefix(redistest.Prefix(t)), WithSyncInterval(250*time.Millisecond, 0))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tt := range []struct {
		limit  hybridlimit.Limit
		live   int64
		shards int
	}{
		{hybridlimit.PerSecond(40), 1, 8}, // 10 tokens an interval, threshold 2
		{hybridlimit.PerSecond(40), 2, 8},
		{hybridlimit.PerSecond(800), 100, 3}, // 200 tokens an interval: 2 each
		{hybridlimit.PerSecond(800), 101, 3}, // under 2 each, whole or split
	} {
		l.live.Store(tt.live)
		whole := l.newEntry("k", "k", tt.limit, now, 0, layout{shards: 1})
		lw := l.lowLimit(whole)
		for j := range tt.shards {
			part := l.newEntry("k", "k", tt.limit, now, j, layout{shards: tt.shards})
			lp := l.lowLimit(part)
			h := l.view(part, partLimit(part), now)
			h.Demand = 100 // some demand, to lease for
			leases := l.pol.Lease(h) > 0
			t.Logf("%v, live %d: whole low=%v, part %d of %d (%v) low=%v, leases %v", tt.limit, tt.live, lw, j, tt.shards, partLimit(part), lp, leases)
			if lp != lw || leases == lw {
				t.Errorf("%v, live %d: whole key low-limit %v, but part %d of %d low-limit %v, leases %v", tt.limit, tt.live, lw, j, tt.shards, lp, leases)
			}
		}
	}
}
