package sync

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestLowLimitSplitFewInstances: the low-limit rule counts a part's
// instances as live/S so that a split key leases as it did whole. With
// fewer live instances than parts, live/S rounded to 0 and was raised to
// 1, so each part's share of the rate met a whole instance's threshold: a
// key that leased whole was decided per request once split.
func TestLowLimitSplitFewInstances(t *testing.T) {
	l, err := New(redistest.Standalone(t), WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	limit := hybridlimit.PerSecond(40) // 10 tokens a 250 ms interval, threshold 2
	now := time.Now()
	for _, live := range []int64{1, 2} {
		l.live.Store(live)
		whole := l.newEntry("k", "k", limit, now, 0, layout{shards: 1})
		part := l.newEntry("k", "k", limit, now, 0, layout{shards: 8})
		lw, lp := l.lowLimit(whole, partLimit(whole)), l.lowLimit(part, partLimit(part))
		t.Logf("live %d: whole low=%v, split 8 ways low=%v (part %v)", live, lw, lp, partLimit(part))
		if lw != lp {
			t.Errorf("live %d: whole key low-limit %v but split 8 ways %v", live, lw, lp)
		}
	}
}
