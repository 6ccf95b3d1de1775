package local

import (
	"strconv"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// TestEvictFutureTimeKeepsDrained: a full shard evicts the bucket
// short of the fewest tokens, "whose loss admits the fewest tokens early",
// and the Table promises that no caller, however far ahead its time, makes
// it forget a bucket still short at its clock (removeIdle caps the time at
// the present). evict weighed the buckets at the caller's time, so an
// insert 61s ahead (one refill of the drained key) saw every bucket full
// and evicted whichever it sampled first: here the drained key (10 tokens
// short, inserted last) rather than the one a token short, which was then
// full again at once.
func TestEvictFutureTimeKeepsDrained(t *testing.T) {
	limit := hybridlimit.PerMinute(10)
	forgiven := 0
	const trials = 40
	for i := range trials {
		dk, lk := "drained"+strconv.Itoa(i), "light"+strconv.Itoa(i)
		tb := mustTable(t, WithShards(1), WithMaxKeys(2))
		now := time.Now()
		if r, err := tb.AllowN(lk, now, limit, 1); err != nil || !r.Allowed {
			t.Fatalf("AllowN(light, 1) = %+v, %v", r, err)
		}
		if r, err := tb.AllowN(dk, now, limit, 10); err != nil || !r.Allowed {
			t.Fatalf("AllowN(drained, 10) = %+v, %v", r, err)
		}
		if _, err := tb.AllowN("new", now.Add(61*time.Second), limit, 1); err != nil {
			t.Fatal(err)
		}
		r, err := tb.Peek(dk, now, limit, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Remaining > 0 {
			forgiven++
		}
	}
	if forgiven > 0 {
		t.Errorf("in %d of %d trials the insert 61s ahead evicted the drained key (10 short) rather than the one 1 short: it holds tokens again now", forgiven, trials)
	}
}
