package sync

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// TestSpread checks that a reshard's credit is divided exactly: the parts
// add up to the tokens, none above its burst, for limits up to the largest
// quantity a Limit allows.
func TestSpread(t *testing.T) {
	for _, limit := range []hybridlimit.Limit{
		hybridlimit.PerSecond(100),
		{Rate: 7, Period: time.Hour, Burst: 10},
		{Rate: hybridlimit.MaxQuantity, Period: time.Second, Burst: hybridlimit.MaxQuantity},
	} {
		for _, s := range []int{1, 2, 3, 4, 7} {
			for _, tokens := range []int64{0, 1, limit.Burst / 3, limit.Burst - 1, limit.Burst, limit.Burst + 5} {
				out := spread(tokens, limit, s)
				var sum int64
				for j, c := range out {
					if b := partOf(limit, j, s).Burst; c < 0 || c > b {
						t.Fatalf("%v split %d, %d tokens: part %d gets %d of burst %d", limit, s, tokens, j, c, b)
					}
					sum += c
				}
				if want := min(tokens, limit.Burst); sum != want {
					t.Errorf("%v split %d, %d tokens: parts get %d in all, want %d", limit, s, tokens, sum, want)
				}
			}
		}
	}
}
