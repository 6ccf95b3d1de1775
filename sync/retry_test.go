package sync_test

import (
	"context"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestRetryAfterIsTheWaitForTheCost drains a key from one instance with
// default options on a real redis-server, then asks for costs above 1: each
// denial's RetryAfter must be the time the rational model of the bucket
// takes to hold that cost, as the exact limiters answer (for a split key,
// of a part: a cost must fit one). The bucket emptied between the drain's
// start and its end, so the model's wait lies within the time since the
// start of c tokens' time; RetryAfter never says less than the model, and
// never more than a sync interval beyond it.
func TestRetryAfterIsTheWaitForTheCost(t *testing.T) {
	redistest.NoLeaks(t)
	for _, tc := range []struct {
		name  string
		opts  []hlsync.Option
		limit hybridlimit.Limit
		part  hybridlimit.Limit // the bucket a cost must fit
		costs []int64
	}{
		{"reserve", nil, hybridlimit.PerMinute(100), hybridlimit.PerMinute(100), []int64{1, 2, 7, 50, 100}},
		{"reserve/low-limit", nil, hybridlimit.PerHour(60), hybridlimit.PerHour(60), []int64{1, 3, 30, 60}},
		{"optimistic", []hlsync.Option{hlsync.WithMode(hlsync.Optimistic)}, hybridlimit.PerMinute(100), hybridlimit.PerMinute(100), []int64{1, 2, 50, 100}},
		{"split", []hlsync.Option{split(2)}, hybridlimit.PerMinute(100), hybridlimit.PerMinute(50), []int64{1, 2, 25, 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := newLimiters(t, 1, clients(t, false), append([]hlsync.Option{hlsync.WithPrefix(redistest.Prefix(t))}, tc.opts...)...)
			l, ctx, key := ls[0], context.Background(), "hot"
			perToken := tc.part.Period / time.Duration(tc.part.Rate)
			start := time.Now()
			// Drained: the burst admitted, and then a denial.
			for admitted := int64(0); ; {
				r, err := l.Allow(ctx, key, tc.limit)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed {
					admitted++
				} else if admitted >= tc.limit.Burst {
					break
				}
				if time.Since(start) > time.Minute {
					t.Fatalf("admitted %d in a minute, want the burst %d and a denial", admitted, tc.limit.Burst)
				}
			}
			for _, cost := range tc.costs {
				r, err := l.AllowN(ctx, key, tc.limit, cost)
				since := time.Since(start)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed {
					continue // a token or two refilled meanwhile: nothing to check
				}
				// The model: an empty bucket (at some instant since start)
				// holds cost after cost tokens' time.
				want := time.Duration(cost) * perToken
				if r.RetryAfter < want-since || r.RetryAfter > want+l.Interval() {
					t.Errorf("AllowN(%d) after a drain: RetryAfter %v, want %v less at most %v (the time since the drain began)",
						cost, r.RetryAfter, want, since.Round(time.Millisecond))
				}
			}
		})
	}
}
