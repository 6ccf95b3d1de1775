package sync

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
)

// offline returns a limiter on a client that is never used.
func offline(t *testing.T) *Limiter {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	l, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestFallbackShare checks the limit an instance keeps to alone: its
// shares never add up to more than the limit, and a long period is not
// stretched past what a limit may have. 1000 per 200 days between two
// instances was one token a year with a burst of 1; that floor is for
// shares of less than a token a year.
func TestFallbackShare(t *testing.T) {
	l := offline(t)
	day := 24 * time.Hour
	for _, tc := range []struct {
		limit hybridlimit.Limit
		n     int64
		want  hybridlimit.Limit
	}{
		{hybridlimit.PerSecond(5), 10, hybridlimit.Limit{Rate: 5, Period: 10 * time.Second, Burst: 1}},
		{hybridlimit.PerSecond(100), 4, hybridlimit.Limit{Rate: 25, Period: time.Second, Burst: 25}},
		{hybridlimit.Limit{Rate: 1000, Period: 200 * day, Burst: 1000}, 2, hybridlimit.Limit{Rate: 500, Period: 200 * day, Burst: 500}},
		{hybridlimit.Limit{Rate: 1000, Period: 200 * day, Burst: 1000}, 3, hybridlimit.Limit{Rate: 333, Period: 200 * day, Burst: 334}},
		{hybridlimit.Limit{Rate: 2, Period: 300 * day, Burst: 2}, 3, hybridlimit.Limit{Rate: 1, Period: hybridlimit.MaxRefill, Burst: 1}},
	} {
		l.live.Store(tc.n)
		got := l.share(tc.limit)
		if got != tc.want {
			t.Errorf("share of %v among %d = %v, want %v", tc.limit, tc.n, got, tc.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("share of %v among %d = %v: %v", tc.limit, tc.n, got, err)
		}
		if got.Period != hybridlimit.MaxRefill && float64(tc.n)*got.TokensIn(366*day) > tc.limit.TokensIn(366*day)+1e-9 {
			t.Errorf("shares of %v among %d (%v each) add up to more than it", tc.limit, tc.n, got)
		}
	}
}

// TestFallbackShareValid: 4 per week with a burst of 209 refills in
// 365.75 days, a valid limit; its share between 2 instances was 2 per
// week with a burst of 105, which takes 367.5 days, more than MaxRefill.
// The fallback table refused it, and every decision on such a key was
// denied while Redis was down, as under FailClosed.
func TestFallbackShareValid(t *testing.T) {
	l := offline(t)
	limit := hybridlimit.Limit{Rate: 4, Period: 7 * 24 * time.Hour, Burst: 209}
	if err := limit.Validate(); err != nil {
		t.Fatal(err)
	}
	l.live.Store(2)
	share := l.share(limit)
	if err := share.Validate(); err != nil {
		t.Errorf("share of %v among 2 = %v: %v", limit, share, err)
	}
	r := l.degraded(nil, l.cfg.clock.Now(), "k", limit, 1)
	if !r.Allowed {
		t.Errorf("hybridlimit.FallbackLocal, first decision on a fresh key: %+v; want allowed from its share", r)
	}
}
